package deepx

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// The suite runs in one of two modes, chosen by DEEPX_GO_TEST_MODE (CTest registers both):
//   - "inprocess" (default): NewRuntime plus the CPU plugin at DEEPX_GO_TEST_CPU_PLUGIN;
//   - "remote": a deepxd started here (the binary at DEEPX_GO_TEST_DEEPXD, serving the same
//     plugin) and Connect to it. Where the host library has no dx_runtime_connect or deepxd is
//     not built, the run prints why and exits with 77, which CTest reports as skipped.
// The assertions are the same in both modes; the few that only hold in one say so.

var (
	cpuPlugin  string // path of the CPU plugin
	remoteAddr string // the daemon's address in remote mode, "" in-process
)

const skipCode = 77

func TestMain(m *testing.M) {
	cpuPlugin = os.Getenv("DEEPX_GO_TEST_CPU_PLUGIN")
	if cpuPlugin == "" {
		fmt.Fprintln(os.Stderr, "DEEPX_GO_TEST_CPU_PLUGIN must name the CPU plugin's library (CTest sets it)")
		os.Exit(2)
	}
	switch mode := os.Getenv("DEEPX_GO_TEST_MODE"); mode {
	case "", "inprocess":
		os.Exit(m.Run())
	case "remote":
		os.Exit(runRemote(m))
	default:
		fmt.Fprintf(os.Stderr, "DEEPX_GO_TEST_MODE=%q: expected inprocess or remote\n", mode)
		os.Exit(2)
	}
}

func runRemote(m *testing.M) int {
	deepxd := os.Getenv("DEEPX_GO_TEST_DEEPXD")
	var missing []string
	if !HasConnect() {
		missing = append(missing, fmt.Sprintf("the host library (ABI %s) has no dx_runtime_connect",
			versionString(ABIVersion())))
	} else if _, err := Connect("unix:/nonexistent/deepxd.sock", nil); errors.Is(err, StatusUnsupported) {
		// A library whose dx_runtime_connect is still a stub refuses every address.
		missing = append(missing, fmt.Sprintf("the host library's dx_runtime_connect refuses: %v", err))
	}
	if deepxd == "" {
		missing = append(missing, "DEEPX_GO_TEST_DEEPXD does not name deepxd")
	} else if _, err := os.Stat(deepxd); err != nil {
		missing = append(missing, fmt.Sprintf("deepxd is not built (no %s)", deepxd))
	}
	if len(missing) > 0 {
		fmt.Println("SKIPPED: the remote run of the Go binding's tests needs dx_runtime_connect and deepxd:")
		for _, s := range missing {
			fmt.Println("  -", s)
		}
		return skipCode
	}
	daemon, err := startDaemon()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer daemon.stop()
	remoteAddr = daemon.address
	return m.Run()
}

// daemon is a deepxd started by the tests, serving the CPU plugin on a socket of its own.
type daemon struct {
	cmd     *exec.Cmd
	dir     string
	address string
}

func startDaemon() (*daemon, error) {
	dir, err := os.MkdirTemp("", "deepx-go-deepxd-")
	if err != nil {
		return nil, err
	}
	socket := filepath.Join(dir, "deepxd.sock")
	logPath := filepath.Join(dir, "deepxd.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(os.Getenv("DEEPX_GO_TEST_DEEPXD"), "--socket", socket, "--plugin", cpuPlugin)
	cmd.Stdout, cmd.Stderr = logFile, logFile // the daemon's JSON-lines log, shown if it fails to start
	// The daemon dies with the test binary, even one that panics before stopping it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("starting deepxd: %w", err)
	}
	d := &daemon{cmd: cmd, dir: dir, address: "unix:" + socket}
	deadline := time.Now().Add(15 * time.Second)
	for {
		if c, err := net.Dial("unix", socket); err == nil {
			c.Close()
			return d, nil
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logPath)
			d.stop()
			return nil, fmt.Errorf("deepxd did not listen at %s within 15 s; its log:\n%s", socket, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill ends the daemon at once (SIGKILL), as a crash would.
func (d *daemon) kill() {
	d.cmd.Process.Kill()
	d.cmd.Wait()
}

func (d *daemon) stop() {
	d.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { d.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		d.kill()
	}
	os.RemoveAll(d.dir)
}

// testRuntime returns a runtime with the CPU plugin: loaded here in-process, the daemon's in
// remote mode. The only line that differs between the modes is the constructor.
func testRuntime(t testing.TB) *Runtime {
	t.Helper()
	if remoteAddr != "" {
		rt, err := Connect(remoteAddr, &ConnectOptions{ClientName: "deepx-go-test"})
		if err != nil {
			t.Fatalf("Connect(%s): %v", remoteAddr, err)
		}
		return rt
	}
	rt, err := NewRuntime(&Options{IgnoreEnv: true})
	if err != nil {
		t.Fatalf("NewRuntime: %v", err)
	}
	if _, err := rt.LoadPlugin(cpuPlugin); err != nil {
		rt.Close()
		t.Fatalf("LoadPlugin(%s): %v", cpuPlugin, err)
	}
	return rt
}

func cpuDevice(t testing.TB, rt *Runtime) int {
	t.Helper()
	d, err := rt.FindDevice("cpu")
	if err != nil {
		t.Fatalf("FindDevice(cpu): %v", err)
	}
	return d
}

func mustClose(t testing.TB, c interface{ Close() error }) {
	t.Helper()
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}
