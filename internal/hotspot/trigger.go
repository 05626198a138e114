package hotspot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// HotSpot starts its attach listener lazily. On SIGQUIT its signal
// dispatcher looks for a file .attach_pid<pid> in the JVM's working
// directory, then in /tmp; if the file is owned by the JVM's effective
// user or by root, it starts the listener, which creates the socket
// /tmp/.java_pid<pid>. Without the file the JVM prints a thread dump
// instead.

// Polling for the socket after SIGQUIT. An idle JVM has it within 2 to 4
// ms; a loaded one may take much longer. As in jattach, each wait is 20 ms
// longer than the one before, up to half a second, but the first look
// comes sooner than jattach's 20 ms.
const (
	pollFirst = 2 * time.Millisecond
	pollStep  = 20 * time.Millisecond
	pollMax   = 500 * time.Millisecond
)

// startListener makes the JVM start its attach listener and waits for its
// socket.
func (t *target) startListener(ctx context.Context) error {
	// The descriptor pins the process: checks made through /proc/PID
	// while it is alive are checks of the process we signal through it,
	// even if PID is reused meanwhile.
	pidfd, err := unix.PidfdOpen(t.pid, 0)
	if err != nil && !errors.Is(err, unix.ENOSYS) {
		return fmt.Errorf("pidfd_open: %w", err)
	}
	if err == nil {
		defer unix.Close(pidfd)
	} else {
		pidfd = -1 // Linux before 5.3: kill(2) it is
	}

	st, err := readStatus(fmt.Sprintf("/proc/%d/status", t.pid))
	if err != nil {
		return err
	}
	jvm, err := IsJVM(t.pid)
	if err != nil {
		return err
	}
	if !jvm {
		return fmt.Errorf("%w: the process does not map libjvm.so, so it is not a HotSpot jvm and SIGQUIT could kill it", ErrNoAttach)
	}
	if !st.catchesQuit {
		// With -Xrs the listener starts with the JVM, so its socket is
		// missing only if something deleted it. A JVM that is starting
		// maps libjvm.so before it installs its handlers.
		return fmt.Errorf("%w: the jvm does not catch SIGQUIT (started with -Xrs or -XX:+ReduceSignalUsage, or still starting) and has no attach socket", ErrNoAttach)
	}
	t.st = st

	remove, err := t.createTrigger()
	if err != nil {
		return err
	}
	defer remove()

	if pidfd >= 0 {
		err = unix.PidfdSendSignal(pidfd, unix.SIGQUIT, nil, 0)
	} else {
		err = unix.Kill(t.pid, unix.SIGQUIT)
	}
	if err != nil {
		return fmt.Errorf("send SIGQUIT: %w", err)
	}

	start := time.Now()
	delay := pollFirst
	timer := time.NewTimer(delay)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("no attach socket %v after SIGQUIT (attach disabled with -XX:+DisableAttachMechanism?): %w",
				time.Since(start).Round(time.Millisecond), ctx.Err())
		case <-timer.C:
		}
		ready, err := t.socketReady()
		if err != nil {
			return err
		}
		if ready {
			return nil
		}
		if pidfd >= 0 && unix.PidfdSendSignal(pidfd, 0, nil, 0) != nil {
			return errors.New("the jvm exited while starting its attach listener")
		}
		delay = min(delay+pollStep, pollMax)
		timer.Reset(delay)
	}
}

// createTrigger creates the trigger file in the JVM's working directory,
// or failing that in its /tmp, and returns the function that removes it.
func (t *target) createTrigger() (func(), error) {
	name := ".attach_pid" + strconv.Itoa(t.st.nspid)
	var errs []error
	cwdPath := fmt.Sprintf("/proc/%d/cwd", t.pid)
	cwd, err := unix.Open(cwdPath, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err == nil {
		remove, err := t.createTriggerIn(cwd, name)
		if err == nil {
			return remove, nil
		}
		unix.Close(cwd)
		errs = append(errs, fmt.Errorf("%s/%s: %w", cwdPath, name, err))
	} else {
		errs = append(errs, &os.PathError{Op: "open", Path: cwdPath, Err: err})
	}
	// The listener also looks in /tmp. The directory descriptor belongs
	// to t, which outlives the trigger.
	tmp, err := unix.Dup(t.tmp)
	if err == nil {
		remove, err := t.createTriggerIn(tmp, name)
		if err == nil {
			return remove, nil
		}
		unix.Close(tmp)
	}
	errs = append(errs, fmt.Errorf("/proc/%d/root/tmp/%s: %w", t.pid, name, err))
	return nil, fmt.Errorf("create attach trigger: %w", errors.Join(errs...))
}

// createTriggerIn creates the trigger file name in directory dir. On
// success the returned function removes the file and closes dir.
//
// HotSpot accepts a trigger owned by root or by its effective user, as
// it sees them in its user namespace. Root outside the JVM's user
// namespace is nobody inside it, so when we are root the file is given to
// the JVM's user.
func (t *target) createTriggerIn(dir int, name string) (func(), error) {
	done := func() {
		unix.Unlinkat(dir, name, 0)
		unix.Close(dir)
	}
	fd, err := unix.Openat(dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if errors.Is(err, unix.EEXIST) {
		// Left behind by a tool that died; it serves if HotSpot trusts
		// it, and we remove it as if it were ours.
		var st unix.Stat_t
		if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return nil, err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG || (st.Uid != 0 && int(st.Uid) != t.st.euid) {
			return nil, fmt.Errorf("exists and is not a regular file owned by root or uid %d", t.st.euid)
		}
		return done, nil
	}
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	owner := os.Geteuid()
	if owner == 0 && t.st.euid != 0 {
		if err := unix.Fchown(fd, t.st.euid, t.st.egid); err != nil {
			unix.Unlinkat(dir, name, 0)
			return nil, fmt.Errorf("chown to %d:%d: %w", t.st.euid, t.st.egid, err)
		}
		owner = t.st.euid
	}
	// Some file systems (NFS with root squashing) give new files another
	// owner, which HotSpot would not trust.
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || int(st.Uid) != owner {
		unix.Unlinkat(dir, name, 0)
		if err == nil {
			err = fmt.Errorf("created as uid %d, the file system made it uid %d", owner, st.Uid)
		}
		return nil, err
	}
	return done, nil
}
