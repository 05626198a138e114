package hotspot

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/perfprof/perfprof/internal/limits"
)

// ErrNoAttach is wrapped by the error of an [Exec] that found no attach
// socket and did not try to start the attach listener, because the
// process is not a HotSpot JVM or does not catch SIGQUIT. SIGQUIT's
// default action kills the process, so such a process is never signalled.
var ErrNoAttach = errors.New("attach listener cannot be started")

// DefaultTimeout bounds [Exec] when its context has no deadline: it covers
// starting the attach listener and running the command.
const DefaultTimeout = 10 * time.Second

// Limits of protocol version 1, from HotSpot's AttachOperation: a longer
// request is dropped by the JVM without a reply.
const (
	maxNameLen = 16
	maxArgLen  = 1024
	maxArgs    = 3
)

// maxReply bounds what is read of a reply. A thread dump (jcmd
// Thread.print) is the longest reply perfprof asks for: some 200 bytes
// of header and a stack of 80 to 120 bytes a frame for each thread, so
// 1 to 3 KiB a thread and 10 to 30 MiB for ten thousand threads. 64 MiB
// leaves twice that for deep stacks; a process that answers more is not
// a JVM perfprof can name threads of, and is counted (limits.AttachReply).
// Replies are read as a stream: the bound is on time and work, not on
// memory held.
const maxReply = 64 << 20

// maxMessage bounds what of a failed command's output is kept to quote
// in its error.
const maxMessage = 4096

// Exec runs one command of the attach protocol in JVM pid and returns its
// output. Commands are those of HotSpot's attach listener: "jcmd",
// "threaddump", "properties", "load", ... For "jcmd" the whole diagnostic
// command line is the first argument, as in
//
//	Exec(ctx, pid, "jcmd", "Compiler.perfmap")
//
// (further arguments of "jcmd" are joined to it with spaces, as the jcmd
// tool does). Other commands take at most three arguments.
//
// If the JVM's attach listener is not running, Exec starts it the way the
// JDK's tools do: it creates the trigger file .attach_pid<pid> and sends
// the JVM a SIGQUIT. It never signals a process that does not map libjvm.so
// or does not catch SIGQUIT; it returns an error wrapping [ErrNoAttach]
// instead. A JVM whose attach mechanism is disabled
// (-XX:+DisableAttachMechanism) prints a thread dump on its stdout for each
// such SIGQUIT and never answers, so the caller should not retry an Exec
// that ran out of time.
//
// The JVM answers with a status, 0 for success. A non-zero status, or a
// jcmd whose output reports a Java exception, is returned as an error that
// holds the JVM's message; JDK 17 and 25 answer -1 with
// "java.lang.IllegalArgumentException: Unknown diagnostic command" to an
// unknown jcmd. Many diagnostic commands report their own failures as
// plain output with status 0 ("flag X does not exist"): the caller knows
// what the output of its command should look like.
//
// Without a deadline in ctx, Exec gives up after [DefaultTimeout]. The
// process answering controls the reply: one longer than maxReply, not
// over by the deadline, or that does not start with a status, is an error
// wrapping a *limits.Error of kind AttachReply.
func Exec(ctx context.Context, pid int, cmd string, args ...string) (string, error) {
	var out []byte
	err := execute(ctx, pid, cmd, args, func(r io.Reader) error {
		var err error
		out, err = io.ReadAll(r)
		return err
	})
	if err != nil {
		return "", err
	}
	return string(out), nil
}

// execute runs one command in JVM pid and hands read the output of a
// successful one as it arrives, at most maxReply bytes of it (a longer
// reply is an error). A reply that is too long, too slow, or not a reply,
// is an error that wraps a *limits.Error of kind AttachReply.
func execute(ctx context.Context, pid int, cmd string, args []string, read func(io.Reader) error) error {
	if err := exchange(ctx, pid, cmd, args, read); err != nil {
		return fmt.Errorf("attach to jvm %d: %w", pid, err)
	}
	return nil
}

func exchange(ctx context.Context, pid int, cmd string, args []string, read func(io.Reader) error) error {
	req, err := request(cmd, args)
	if err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	conn, err := dial(ctx, pid)
	if err != nil {
		return err
	}
	defer conn.Close()

	// The deadline bounds a JVM that accepts the connection but does not
	// answer, or answers slowly; cancellation unblocks the read at once.
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	what := strings.TrimSpace(cmd + " " + strings.Join(args, " "))
	if _, err := conn.Write(req); err != nil {
		return fmt.Errorf("%s: send: %w", what, ioErr(ctx, err))
	}
	br := bufio.NewReaderSize(&replyReader{r: conn, left: maxReply}, 64<<10)
	if err := readReply(ctx, br, cmd, read); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// readReply reads a reply: its status line, then the output, which goes
// to read when the status is 0 and the output reports no exception.
func readReply(ctx context.Context, br *bufio.Reader, cmd string, read func(io.Reader) error) error {
	line, err := br.ReadSlice('\n')
	switch {
	case len(line) == 0 && err == io.EOF:
		return fmt.Errorf("no reply (%s)", rejected)
	case err == bufio.ErrBufferFull:
		return limits.Errorf(limits.AttachReply, "reply does not start with a status: a first line of more than %d bytes", len(line))
	case err != nil && err != io.EOF:
		return replyErr(ctx, "read reply", err)
	}
	code, err := strconv.Atoi(string(bytes.TrimSpace(line)))
	if err != nil {
		return limits.Errorf(limits.AttachReply, "reply does not start with a status: %q", truncate(string(line), 80))
	}
	// The head of the output: all of a failure's message, and the line
	// where a jcmd reports an exception.
	head := make([]byte, maxMessage)
	n, err := io.ReadFull(br, head)
	head = head[:n]
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return replyErr(ctx, "read reply", err)
	}
	if code != 0 {
		return fmt.Errorf("jvm returned status %d: %s", code, message(string(head)))
	}
	if cmd == "jcmd" {
		if exc := javaException(string(head)); exc != "" {
			return errors.New(exc)
		}
	}
	if err := read(io.MultiReader(bytes.NewReader(head), br)); err != nil {
		return replyErr(ctx, "read output", err)
	}
	return nil
}

// errReplyTooLarge is returned by a replyReader past maxReply.
var errReplyTooLarge = limits.Errorf(limits.AttachReply, "reply longer than %d MiB", maxReply>>20)

// replyReader reads at most left bytes of a reply, and then fails with
// errReplyTooLarge if there are more: a reply that ends at the bound
// reads whole.
type replyReader struct {
	r    io.Reader
	left int64
}

func (r *replyReader) Read(p []byte) (int, error) {
	if r.left <= 0 {
		var one [1]byte
		n, err := r.r.Read(one[:])
		if n > 0 {
			err = errReplyTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := r.r.Read(p)
	r.left -= int64(n)
	return n, err
}

// replyErr explains an error reading a reply: a JVM that has not sent
// all of it by the deadline is counted as a reply too slow.
func replyErr(ctx context.Context, op string, err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%s: %w: %w", op, limits.Errorf(limits.AttachReply, "reply not over by the deadline"), ctxErr(ctx, err))
	}
	return fmt.Errorf("%s: %w", op, ioErr(ctx, err))
}

// request encodes a protocol version 1 request:
// "1" NUL cmd NUL arg1 NUL arg2 NUL arg3 NUL, with missing arguments empty.
func request(cmd string, args []string) ([]byte, error) {
	if cmd == "jcmd" && len(args) > 1 {
		args = []string{strings.Join(args, " ")}
	}
	if cmd == "" || len(cmd) > maxNameLen || strings.IndexByte(cmd, 0) >= 0 {
		return nil, fmt.Errorf("invalid command %q: want 1 to %d bytes and no NUL", cmd, maxNameLen)
	}
	if len(args) > maxArgs {
		return nil, fmt.Errorf("%s: %d arguments, at most %d fit the protocol", cmd, len(args), maxArgs)
	}
	var b bytes.Buffer
	b.WriteString("1\x00")
	b.WriteString(cmd)
	b.WriteByte(0)
	for i := range maxArgs {
		if i < len(args) {
			a := args[i]
			if len(a) > maxArgLen || strings.IndexByte(a, 0) >= 0 {
				return nil, fmt.Errorf("%s: argument %d: want at most %d bytes and no NUL", cmd, i+1, maxArgLen)
			}
			b.WriteString(a)
		}
		b.WriteByte(0)
	}
	return b.Bytes(), nil
}

// HotSpot closes the connection without a word when it rejects the
// client's credentials or cannot parse the request.
const rejected = "the jvm closed the connection: it takes requests from root and its own user only, as it sees them"

// javaException returns the first line of a jcmd output that reports a
// Java exception, as "java.lang.IllegalArgumentException: Unknown
// diagnostic command", or "". The attach listener streams a jcmd's output
// after it has already sent status 0 (JDK 24 and later), so an exception
// thrown while the command runs reaches the client only in the output.
func javaException(out string) string {
	first, _, _ := strings.Cut(strings.TrimLeft(out, "\n"), "\n")
	class, _, _ := strings.Cut(first, ":")
	if !strings.Contains(class, ".") || strings.ContainsAny(class, " \t") {
		return ""
	}
	if !strings.HasSuffix(class, "Exception") && !strings.HasSuffix(class, "Error") {
		return ""
	}
	return message(out)
}

// message is the first lines of a JVM's error output, to quote in an error.
func message(out string) string {
	out = strings.TrimSpace(out)
	if out == "" {
		return "(no message)"
	}
	lines := strings.SplitN(out, "\n", 4)
	if len(lines) > 3 {
		lines[3] = "..."
	}
	return truncate(strings.Join(lines, "; "), 500)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// ioErr explains an error on the attach connection.
func ioErr(ctx context.Context, err error) error {
	if errors.Is(err, unix.EPIPE) || errors.Is(err, unix.ECONNRESET) {
		return fmt.Errorf("%w (%s)", err, rejected)
	}
	return ctxErr(ctx, err)
}

// ctxErr prefers the context's error to the I/O error it caused.
func ctxErr(ctx context.Context, err error) error {
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	if e := ctx.Err(); e != nil {
		return e
	}
	// The connection's deadline is the context's, whose timer may not
	// have fired yet.
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return err
}

// dial connects to the attach listener of process pid, starting it if
// needed.
func dial(ctx context.Context, pid int) (*net.UnixConn, error) {
	t, err := openTarget(pid)
	if err != nil {
		return nil, err
	}
	defer t.close()
	ready, err := t.socketReady()
	if err != nil {
		return nil, err
	}
	if !ready {
		if err := t.startListener(ctx); err != nil {
			return nil, err
		}
	}
	return t.connect(ctx)
}

// target is a process being attached to. The JVM names its files after
// its pid in its own pid namespace and puts them in its own /tmp, which
// for a process in a container is reachable only as /proc/PID/root/tmp.
type target struct {
	pid int
	st  status
	// tmp is an O_PATH descriptor of the target's /tmp.
	tmp int
}

func openTarget(pid int) (*target, error) {
	st, err := readStatus(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	tmp, err := openTmp(pid)
	if err != nil {
		return nil, err
	}
	return &target{pid: pid, st: st, tmp: tmp}, nil
}

func (t *target) close() { unix.Close(t.tmp) }

// openTmp opens /tmp as seen by process pid. Symbolic links are resolved
// inside the process's root, so that a container's /tmp -> /etc cannot
// lead us, who may be root, to the host's /etc.
func openTmp(pid int) (int, error) {
	root := fmt.Sprintf("/proc/%d/root", pid)
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(rfd)
	fd, err := unix.Openat2(rfd, "tmp", &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOSYS) { // Linux before 5.6
		fd, err = unix.Openat(rfd, "tmp", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: root + "/tmp", Err: err}
	}
	return fd, nil
}

func (t *target) socketName() string { return ".java_pid" + strconv.Itoa(t.st.nspid) }

// socketReady reports whether the JVM's attach socket exists. A file of
// that name that is not a socket owned by the JVM's user is an error: it
// is not the JVM's and will not become so.
func (t *target) socketReady() (bool, error) {
	var st unix.Stat_t
	err := unix.Fstatat(t.tmp, t.socketName(), &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	path := fmt.Sprintf("/proc/%d/root/tmp/%s", t.pid, t.socketName())
	if err != nil {
		return false, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return false, fmt.Errorf("%s is not a socket", path)
	}
	if int(st.Uid) != t.st.euid {
		return false, fmt.Errorf("%s is owned by uid %d, not by the jvm's uid %d", path, st.Uid, t.st.euid)
	}
	return true, nil
}

// connect connects to the attach socket and checks that the process
// listening on it is the target.
func (t *target) connect(ctx context.Context) (*net.UnixConn, error) {
	// The path goes through our descriptor of the target's /tmp: it
	// names the directory we checked, and fits in sun_path.
	path := fmt.Sprintf("/proc/self/fd/%d/%s", t.tmp, t.socketName())
	conn, err := t.dialAs(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("connect to /proc/%d/root/tmp/%s: %w", t.pid, t.socketName(), ctxErr(ctx, err))
	}
	var cred *unix.Ucred
	var cerr error
	raw, err := conn.SyscallConn()
	if err == nil {
		err = raw.Control(func(fd uintptr) {
			cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		})
	}
	if err == nil {
		err = cerr
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("attach socket peer credentials: %w", err)
	}
	if int(cred.Pid) != t.pid || int(cred.Uid) != t.st.euid {
		conn.Close()
		return nil, fmt.Errorf("attach socket is served by pid %d uid %d, not by the jvm (pid %d uid %d)",
			cred.Pid, cred.Uid, t.pid, t.st.euid)
	}
	return conn, nil
}
