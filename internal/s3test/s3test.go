// Package s3test runs a real S3 server on loopback for tests: versitygw with its
// posix backend, built from the module pinned in server/go.mod (a module of its
// own, so that neither perfprof's go.mod nor the collector carries versitygw's
// dependencies). The binary is built once per test binary by `go tool -n`, which
// keeps it in the Go build cache: the first build of a machine takes about a
// minute, later ones well under a second.
//
// A Server can be stopped and started again on the same port and root, the way an
// uploader test takes the backend away and brings it back.
package s3test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// The fixed credentials and region every Server runs with.
const (
	AccessKey = "perfprof-test-access"
	SecretKey = "perfprof-test-secret-0123456789"
	Region    = "us-east-1"
)

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// serverModuleDir is the directory of the tools module that pins versitygw.
func serverModuleDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("s3test: cannot locate its own source")
	}
	dir := filepath.Join(filepath.Dir(file), "server")
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return "", fmt.Errorf("s3test: the versitygw tools module: %w", err)
	}
	return dir, nil
}

// Binary returns the path of the versitygw executable, building it on the first
// call of the test binary (`go -C server tool -n versitygw`: the Go build cache
// keeps the executable; its modules come from the module cache, downloaded on a
// new machine through GOPROXY).
func Binary(tb testing.TB) string {
	tb.Helper()
	buildOnce.Do(func() {
		dir, err := serverModuleDir()
		if err != nil {
			buildErr = err
			return
		}
		goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(goBin); err != nil {
			goBin = "go"
		}
		start := time.Now()
		cmd := exec.Command(goBin, "tool", "-n", "versitygw")
		cmd.Dir = dir
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			buildErr = fmt.Errorf("s3test: building versitygw: %v\n%s", err, stderr.String())
			return
		}
		buildPath = strings.TrimSpace(string(out))
		tb.Logf("s3test: versitygw at %s (%v)", buildPath, time.Since(start).Round(time.Millisecond))
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return buildPath
}

// Server is one versitygw process serving Root on Addr.
type Server struct {
	Addr     string // 127.0.0.1:port
	Endpoint string // http://127.0.0.1:port
	Root     string // the posix backend's top directory: one subdirectory per bucket
	Bucket   string // created by Start

	// StartupTime is how long the last start took until the port answered HTTP.
	StartupTime time.Duration

	bin     string
	logPath string
	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
}

// Start builds versitygw if needed and starts it on a free loopback port with a
// new temporary root, creates bucket and stops the server when the test ends.
func Start(tb testing.TB, bucket string) *Server {
	tb.Helper()
	s := &Server{bin: Binary(tb), Root: tb.TempDir(), Bucket: bucket}
	s.logPath = filepath.Join(tb.TempDir(), "versitygw.log")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s.Addr = ln.Addr().String()
	ln.Close()
	s.Endpoint = "http://" + s.Addr
	tb.Cleanup(func() {
		s.Stop(tb)
		if tb.Failed() {
			if b, err := os.ReadFile(s.logPath); err == nil && len(b) > 0 {
				tb.Logf("versitygw log:\n%s", b)
			}
		}
	})
	s.Restart(tb)
	if bucket != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := s.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
			tb.Fatalf("s3test: creating bucket %q: %v", bucket, err)
		}
	}
	return s
}

// Restart starts the server (again) on the same address and root and waits until
// it answers HTTP. It fails the test if the server is running.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		tb.Fatal("s3test: Restart of a running server")
	}
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		tb.Fatal(err)
	}
	defer logf.Close()
	start := time.Now()
	cmd := exec.Command(s.bin,
		"--port", s.Addr,
		"--region", Region,
		"--keep-alive", // as a real S3 endpoint: pooled connections go stale when it stops
		"--quiet",
		"posix", s.Root)
	// Credentials by environment, not argv (versitygw reads both).
	cmd.Env = append(os.Environ(),
		"ROOT_ACCESS_KEY_ID="+AccessKey,
		"ROOT_SECRET_ACCESS_KEY="+SecretKey)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("s3test: starting versitygw: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s.cmd, s.exited = cmd, exited

	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-exited:
			s.cmd = nil
			tb.Fatalf("s3test: versitygw exited at start: %v", cmd.ProcessState)
		default:
		}
		resp, err := hc.Get(s.Endpoint + "/")
		if err == nil {
			resp.Body.Close() // any answer (403 without signature) means it serves
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("s3test: versitygw not answering on %s after 30 s: %v", s.Addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.StartupTime = time.Since(start)
}

// Stop ends the server (SIGTERM, SIGKILL after 5 s) and waits until it has
// exited; the root is kept for Restart. Stopping a stopped server does nothing.
func (s *Server) Stop(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
	s.cmd = nil
}

// Client returns an S3 client for the server with static credentials, the
// server's endpoint and path-style addressing (versitygw serves virtual-hosted
// buckets only with --virtual-domain, and 127.0.0.1 has no subdomains).
func (s *Server) Client(optFns ...func(*s3.Options)) *s3.Client {
	opts := []func(*s3.Options){func(o *s3.Options) {
		o.BaseEndpoint = aws.String(s.Endpoint)
		o.UsePathStyle = true
	}}
	return s3.New(s3.Options{
		Region:      Region,
		Credentials: credentials.NewStaticCredentialsProvider(AccessKey, SecretKey, ""),
	}, append(opts, optFns...)...)
}
