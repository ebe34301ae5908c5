#!/usr/bin/python3
"""Checks that the project's documentation references resolve.

    /usr/bin/python3 docs/check_links.py REPO_ROOT

Three checks, each printing `file:line: message` for every problem found:

1. Every relative Markdown link `[text](path)` in a README.md (anywhere in the repository) or in
   docs/*.md names an existing file or directory, resolved against the file that holds the link.
   An anchor (`path#anchor`) is dropped; links to URLs (`https:`, `mailto:`, ...) and to anchors
   of the same page (`#anchor`) are not checked. Links inside fenced code blocks and inline code
   spans are ignored.
2. Every `docs/<file>` reference in those files, in the public headers (abi/include,
   host/include) and in the other sources, CMake files and scripts names an existing file or
   directory under the repository root.
3. No file of the repository (every file git knows of, tracked or untracked but not ignored)
   mentions the outside design documents: the project's documentation lives in docs/, and a
   vendor who has only this repository must be able to follow every reference.

Exit status: 0 when everything resolves, 1 otherwise, 2 on a usage error. Standard library only.
"""

import os
import re
import subprocess
import sys

# Folders that are never part of the source tree.
SKIPPED_DIRS = {".git", "build", ".cache"}

# The design documents kept outside this repository. The names are assembled from parts so that
# this script does not mention them itself.
_OUTSIDE_DOCS = ["OPS", "CONFORMANCE", "PERFORMANCE", "ARCHITECTURE", "STYLE"]
OUTSIDE_RE = re.compile(
    r"(?<![A-Za-z0-9_])(?:" + "|".join(_OUTSIDE_DOCS) + r")\.md(?![A-Za-z0-9_])"
    + "|" + "shared" + "/" + "design")

# [text](target) or [text](<target>), with an optional "title".
MD_LINK_RE = re.compile(r"\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# docs/<path>: not part of a longer path (build/default/docs/html, ../docs/x are handled by
# check 1 or are build outputs).
DOCS_REF_RE = re.compile(r"(?<![A-Za-z0-9_./-])docs/[A-Za-z0-9_./-]*")
URL_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
FENCE_RE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE_RE = re.compile(r"(`+)(?:(?!\1).)+\1")


def repo_files(root):
    """Every file git knows of (tracked, or untracked and not ignored); a walk without git."""
    try:
        out = subprocess.run(
            ["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            check=True, capture_output=True).stdout
        names = sorted({n for n in out.decode("utf-8", "surrogateescape").split("\0") if n})
        return [n for n in names if os.path.isfile(os.path.join(root, n))]
    except (OSError, subprocess.CalledProcessError):
        names = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
            for f in sorted(filenames):
                names.append(os.path.relpath(os.path.join(dirpath, f), root))
        return names


def read_lines(path):
    with open(path, "rb") as f:
        return f.read().decode("utf-8", "replace").splitlines()


def is_markdown_doc(name):
    return os.path.basename(name) == "README.md" or (
        os.path.dirname(name) == "docs" and name.endswith(".md"))


CODE_SUFFIXES = (".h", ".hpp", ".inc", ".c", ".cc", ".cpp", ".cu", ".cmake", ".py", ".sh", ".in",
                 ".txt")


def is_code_file(name):
    # Headers (abi/include and host/include included), sources, CMake files, scripts, manifests.
    return name.endswith(CODE_SUFFIXES) or os.path.basename(name) == "Makefile"


def clean_docs_ref(ref):
    # Sentence punctuation after a path ("see docs/versioning.md.") is not part of it.
    return ref.rstrip(".,;:")


def check(root):
    problems = []
    files = repo_files(root)

    def report(name, line_no, message):
        problems.append(f"{name}:{line_no}: {message}")

    for name in files:
        path = os.path.join(root, name)
        try:
            lines = read_lines(path)
        except OSError as e:
            report(name, 0, f"cannot read: {e}")
            continue

        # 3. No reference to the outside design documents, anywhere.
        for i, line in enumerate(lines, 1):
            for m in OUTSIDE_RE.finditer(line):
                report(name, i, f"refers to '{m.group(0)}', a design document outside this "
                                "repository; point to the page in docs/ instead")

        markdown = is_markdown_doc(name)
        if not markdown and not is_code_file(name):
            continue
        in_fence = False
        for i, line in enumerate(lines, 1):
            if markdown and FENCE_RE.match(line):
                in_fence = not in_fence
                continue
            # 2. docs/<file> references (also inside code: a command line names real files).
            for m in DOCS_REF_RE.finditer(line):
                ref = clean_docs_ref(m.group(0)).split("#", 1)[0]
                if not os.path.exists(os.path.join(root, ref)):
                    report(name, i, f"'{ref}' does not exist")
            # 1. Relative Markdown links.
            if not markdown or in_fence:
                continue
            for m in MD_LINK_RE.finditer(INLINE_CODE_RE.sub("", line)):
                target = m.group(1)
                if target.startswith("#") or URL_SCHEME_RE.match(target):
                    continue
                file_part = target.split("#", 1)[0]
                resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part))
                if not os.path.exists(resolved):
                    report(name, i, f"link target '{target}' does not exist")
                elif not os.path.realpath(resolved).startswith(os.path.realpath(root) + os.sep):
                    report(name, i, f"link target '{target}' is outside the repository")
    return problems


def main(argv):
    if len(argv) != 2 or not os.path.isdir(argv[1]):
        print("usage: check_links.py REPO_ROOT", file=sys.stderr)
        return 2
    problems = check(os.path.abspath(argv[1]))
    for p in problems:
        print(p)
    if problems:
        print(f"check_links: {len(problems)} broken reference(s)", file=sys.stderr)
        return 1
    print("check_links: every reference resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
