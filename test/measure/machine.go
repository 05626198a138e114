package measure

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ModuleRoot finds the directory of this module's go.mod.
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("run from inside the perfprof module (go env GOMOD is empty)")
	}
	return filepath.Dir(gomod), nil
}

// LoadAvg is the 1, 5 and 15 minute load averages.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// Kernel is "Linux" and the kernel's release.
func Kernel() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "Linux"
	}
	return "Linux " + strings.TrimSpace(string(b))
}

// CommandLine is the tool's command line; a binary built by go run is
// shown as the go run command of pkg ("./test/overhead").
func CommandLine(pkg string) string {
	// go run builds in the build cache or the temporary directory.
	if strings.Contains(os.Args[0], string(filepath.Separator)+"go-build") {
		return strings.TrimSpace("go run " + pkg + " " + ShellQuote(os.Args[1:]))
	}
	return ShellQuote(os.Args)
}

// ShellQuote joins args so that they can be pasted into a shell.
func ShellQuote(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=.,/:+@") == "" {
			q[i] = a
		} else {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}
