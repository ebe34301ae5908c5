#!/usr/bin/python3
"""PyTorch side of deepx-bench-ops: times the same cases with torch on the CPU.

deepx-bench-ops writes the cases it measured as JSON lines (op, forward input and output
tensors with dtype, shape and how to fill them, attributes, backward or not) and runs this
script with Debian's /usr/bin/python3 (python3-torch 1.13, python3-numpy). For each case it
builds the same tensors, warms up, then times R rounds of calls back to back (about --round-ms
each) and prints the median, min and max seconds per call. Output, one line each,
tab-separated:

    torch <version>, <n> threads, <backend>  once, first
    unavailable <reason>                    torch cannot be imported (nothing else follows)
    ok <id> <median> <min> <max> <note>     note: empty, or how the op is expressed in torch
    na <id> <reason>                        this case cannot be run with torch

Where torch has an out= variant the call writes into a preallocated output, as deepx does;
otherwise the result is allocated per call (PyTorch's normal behaviour), and the note says so.
"""
import argparse
import json
import math
import sys
import time


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--round-ms", type=float, default=30)
    parser.add_argument("--cases", required=True)
    args = parser.parse_args()
    try:
        import torch  # noqa: F401
    except Exception as e:  # ImportError, or a broken install
        print("unavailable python3-torch cannot be imported (%s); run .ci/install-bench-deps.sh"
              % str(e).replace("\t", " "), flush=True)
        return 0
    import torch
    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    backend = [line.split(":", 1)[1].strip() for line in torch.__config__.parallel_info().splitlines()
               if "parallel backend" in line]
    print("torch %s, %d threads%s" % (torch.__version__, torch.get_num_threads(),
                                      ", " + backend[0] if backend else ""), flush=True)
    with open(args.cases) as f:
        cases = [json.loads(line) for line in f if line.strip()]
    for case in cases:
        try:
            fn, note = build(torch, case)
        except Exception as e:
            print("na\t%s\t%s" % (case["id"], oneline(e)), flush=True)
            continue
        try:
            t = measure(fn, args.rounds, args.round_ms / 1000.0)
        except Exception as e:
            print("na\t%s\terror: %s" % (case["id"], oneline(e)), flush=True)
            continue
        print("ok\t%s\t%.9g\t%.9g\t%.9g\t%s" % (case["id"], t[0], t[1], t[2], note), flush=True)
        del fn
    return 0


def oneline(e):
    return (type(e).__name__ + ": " + str(e)).replace("\t", " ").splitlines()[0][:200]


def timed_round(fn, round_seconds):
    """Calls fn back to back until round_seconds have passed (at least once); seconds per call."""
    t0 = time.perf_counter()
    calls = 0
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= round_seconds:
            return elapsed / calls


def measure(fn, rounds, round_seconds):
    fn()  # warm-up
    one = timed_round(fn, 0)
    rounds = max(3, min(rounds, int(math.ceil(2.0 / one)) if one > 0 else rounds))
    times = sorted(timed_round(fn, round_seconds) for _ in range(rounds))
    n = len(times)
    med = times[n // 2] if n % 2 else (times[n // 2 - 1] + times[n // 2]) / 2
    return med, times[0], times[-1]


DTYPES = {"f32": "float32", "f64": "float64", "f16": "float16", "i64": "int64", "i32": "int32"}


def make(torch, spec, seed):
    if spec is None:
        return None
    dtype = getattr(torch, DTYPES[spec["dtype"]])
    shape = spec["shape"]
    g = torch.Generator().manual_seed(seed)
    if spec["init"] == "index":
        return torch.randint(0, spec["range"], shape, dtype=dtype, generator=g)
    if dtype.is_floating_point:
        return torch.rand(shape, dtype=dtype, generator=g) * 4 - 2
    return torch.zeros(shape, dtype=dtype)


def empty_like_spec(torch, spec):
    return torch.empty(spec["shape"], dtype=getattr(torch, DTYPES[spec["dtype"]]))


def dims_of(case, x):
    axes = case["attrs"].get("axes")
    return tuple(range(x.dim())) if not axes else tuple(axes)


def pair(v, default):
    if v is None:
        return default
    return tuple(v) if isinstance(v, list) else (v, v)


def build(torch, case):
    """Returns (a zero-argument callable doing the op once, a note)."""
    F = torch.nn.functional
    op = case["op"]
    attrs = case["attrs"]
    ins = [make(torch, s, 1 + i) for i, s in enumerate(case["inputs"])]
    outs = [empty_like_spec(torch, s) for s in case["outputs"]]
    if case["backward"]:
        return build_backward(torch, case, ins, outs)
    x = ins[0]
    y = outs[0] if outs else None
    if op == "dx.add":
        return (lambda: torch.add(ins[0], ins[1], out=y)), ""
    if op == "dx.mul":
        return (lambda: torch.mul(ins[0], ins[1], out=y)), ""
    if op == "dx.exp":
        return (lambda: torch.exp(x, out=y)), ""
    if op == "dx.sigmoid":
        return (lambda: torch.sigmoid(x, out=y)), ""
    if op == "dx.relu":
        # torch.relu has no out= variant; clamp_min(x, 0) is the same function (NaN propagates).
        return (lambda: torch.clamp_min(x, 0.0, out=y)), "clamp_min(out=)"
    if op == "dx.gelu":
        return (lambda: torch._C._nn.gelu(x, out=y)), ""
    if op == "dx.cast":
        return (lambda: y.copy_(x)), ""
    if op == "dx.sum":
        d = dims_of(case, x)
        return (lambda: torch.sum(x, dim=d, out=y)), ""
    if op == "dx.max":
        d = dims_of(case, x)
        return (lambda: torch.amax(x, dim=d, out=y)), ""
    if op in ("dx.softmax", "dx.log_softmax"):
        axis = attrs.get("axis", -1)
        f = torch._softmax if op == "dx.softmax" else torch._log_softmax
        return (lambda: f(x, axis, False, out=y)), ""
    if op == "dx.layer_norm":
        axis = attrs.get("axis", -1)
        axis = axis if axis >= 0 else x.dim() + axis
        shape = list(x.shape[axis:])
        eps = attrs.get("eps", 1e-5)
        return (lambda: torch.native_layer_norm(x, shape, ins[1], ins[2], eps)), "allocates"
    if op == "dx.rms_norm":
        eps = attrs.get("eps", 1e-5)
        w = ins[1]
        # torch 1.13 has no rms_norm: the usual composition (as in LLaMA's reference code).
        return (lambda: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w), "composed"
    if op == "dx.matmul":
        a, b = ins
        if attrs.get("transpose_a"):
            a = a.transpose(-1, -2)
        if attrs.get("transpose_b"):
            b = b.transpose(-1, -2)
        return (lambda: torch.matmul(a, b, out=y)), ""
    if op == "dx.linear":
        w, b = ins[1], ins[2]
        if x.dim() == 2 and b is not None:
            return (lambda: torch.addmm(b, x, w.t(), out=y)), ""
        return (lambda: F.linear(x, w, b)), "allocates"
    if op == "dx.conv2d":
        stride = pair(attrs.get("stride"), (1, 1))
        padding = pair(attrs.get("padding"), (0, 0))
        dilation = pair(attrs.get("dilation"), (1, 1))
        groups = attrs.get("groups", 1)
        return (lambda: F.conv2d(x, ins[1], ins[2], stride, padding, dilation, groups)), "allocates"
    if op == "dx.max_pool2d":
        kernel = pair(attrs.get("kernel"), None)
        stride = pair(attrs.get("stride"), kernel)
        padding = pair(attrs.get("padding"), (0, 0))
        return (lambda: F.max_pool2d(x, kernel, stride, padding)), "allocates"
    if op == "dx.scaled_dot_product_attention":
        q, k, v, mask = ins
        if mask is not None or attrs.get("causal"):
            raise NotImplementedError("mask/causal not set up in this script")
        scale = attrs.get("scale", 1.0 / math.sqrt(q.shape[-1]))
        # torch 1.13 has no fused attention (F.scaled_dot_product_attention came in 2.0).
        return (lambda: torch.matmul(torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * scale, -1), v)), \
            "composed"
    if op == "dx.embedding":
        w, idx = ins
        if idx.dim() != 1:
            return (lambda: F.embedding(idx, w)), "allocates"
        # aten::embedding is index_select on dim 0; the out= form writes in place like deepx.
        return (lambda: torch.index_select(w, 0, idx, out=y)), "index_select(out=)"
    if op == "dx.cross_entropy":
        reduction = attrs.get("reduction", "mean")
        return (lambda: F.cross_entropy(x, ins[1], reduction=reduction)), "allocates"
    if op == "dx.transpose":
        perm = attrs.get("perm") or list(reversed(range(x.dim())))
        return (lambda: y.copy_(x.permute(*perm))), ""
    if op == "dx.copy":
        return (lambda: y.copy_(x)), ""
    if op == "dx.concat":
        axis = attrs.get("axis", 0)
        return (lambda: torch.cat(ins, dim=axis, out=y)), ""
    raise NotImplementedError("no torch equivalent set up for " + op)


def build_backward(torch, case, ins, outs):
    """Backward cases: torch autograd on the same forward, timing only the backward pass."""
    op = case["op"]
    want = case.get("want_grad", [])
    with torch.enable_grad():
        leaves = []
        for i, t in enumerate(ins):
            if t is not None and i < len(want) and want[i]:
                t.requires_grad_(True)
                leaves.append(t)
        if op == "dx.matmul":
            y = torch.matmul(ins[0], ins[1])
        elif op == "dx.softmax":
            axis = case["attrs"].get("axis", -1)
            x, dy = ins[0].detach(), make(torch, case["outputs"][0], 99)
            y = torch.softmax(x, axis)
            dx = torch.empty_like(x)
            # The kernel autograd runs for softmax, with an out= form (no allocation).
            return (lambda: torch._softmax_backward_data(dy, y, axis, x.dtype, grad_input=dx)), ""
        elif op == "dx.layer_norm":
            x, w, b = ins
            shape = [x.shape[-1]]
            y, mean, rstd = torch.native_layer_norm(x.detach(), shape, w.detach(), b.detach(), 1e-5)
            dy = make(torch, case["outputs"][0], 99)
            mask = [bool(m) for m in (want + [False] * 3)[:3]]
            # The kernel autograd runs for layer_norm (results allocated per call).
            return (lambda: torch.ops.aten.native_layer_norm_backward(dy, x.detach(), shape, mean, rstd,
                                                                       w.detach(), b.detach(), mask)), \
                "allocates"
        else:
            raise NotImplementedError("no torch backward set up for " + op)
        dy = make(torch, case["outputs"][0], 99)

    def step():
        with torch.enable_grad():
            torch.autograd.grad(y, leaves, dy, retain_graph=True)
    return step, "autograd"


if __name__ == "__main__":
    sys.exit(main())
