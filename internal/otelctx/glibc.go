package otelctx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// ErrNoThreadList means the thread pointer of a thread cannot be found
// without stopping it: the process is not dynamically linked against glibc
// (static, musl), or its glibc lacks the libthread_db descriptors.
var ErrNoThreadList = errors.New("glibc thread list not found")

// glibcThreads finds a thread's struct pthread the way libthread_db does,
// without ptrace: glibc keeps every thread's descriptor on one of two lists
// in ld.so's _rtld_global (_dl_stack_used: stacks glibc allocated;
// _dl_stack_user: the main thread and user-supplied stacks), and describes
// the offsets of the fields a debugger needs in libc's _thread_db_*
// constants, each {size in bits, count, offset} as uint32s. On x86-64 the
// struct pthread starts with the TCB, so its address is the thread pointer
// (fs_base).
type glibcThreads struct {
	lists       [2]uint64 // addresses of the list heads in the process
	pthreadList uint64    // offset of struct pthread's list_t
	pthreadTID  uint64    // offset of struct pthread's tid
	pthreadSelf uint64    // offset of tcbhead_t.self, which points at itself
}

// maxThreads bounds a list walk: the lists are read while the process runs
// and may be torn.
const maxThreads = 1 << 20

func findGlibcThreads(objs []*object) (glibcThreads, error) {
	var g glibcThreads
	var rtld, libc *object
	var rtldGlobal uint64
	for _, o := range objs {
		if s, _, ok := o.lookup("_rtld_global"); ok && rtld == nil {
			rtld, rtldGlobal = o, o.bias+s.Value
		}
		if _, _, ok := o.lookup("_thread_db_pthread_tid"); ok && libc == nil {
			libc = o
		}
	}
	if rtld == nil || libc == nil {
		return g, fmt.Errorf("%w: no _rtld_global (ld.so) or _thread_db_pthread_tid (libc)", ErrNoThreadList)
	}
	desc := func(name string) (uint64, error) {
		s, _, ok := libc.lookup(name)
		if !ok {
			return 0, fmt.Errorf("%w: %s has no %s", ErrNoThreadList, libc.path, name)
		}
		b, err := libc.readFile(s.Value, 12)
		if err != nil {
			return 0, fmt.Errorf("%w: %s: %w", ErrNoThreadList, name, err)
		}
		return uint64(binary.LittleEndian.Uint32(b[8:])), nil
	}
	var errs [4]error
	var used, user uint64
	used, errs[0] = desc("_thread_db_rtld_global__dl_stack_used")
	user, errs[1] = desc("_thread_db_rtld_global__dl_stack_user")
	g.pthreadList, errs[2] = desc("_thread_db_pthread_list")
	g.pthreadTID, errs[3] = desc("_thread_db_pthread_tid")
	if err := errors.Join(errs[:]...); err != nil {
		return g, err
	}
	g.lists = [2]uint64{rtldGlobal + used, rtldGlobal + user}
	g.pthreadSelf = 16 // tcbhead_t {void *tcb; dtv_t *dtv; void *self; ...}
	return g, nil
}

// threadPointer returns the thread pointer of thread tid.
func (g glibcThreads) threadPointer(mem io.ReaderAt, tid int) (uint64, error) {
	for _, head := range g.lists {
		next, err := readU64(mem, head)
		if err != nil {
			return 0, fmt.Errorf("read thread list head at %#x: %w", head, err)
		}
		for n := 0; next != head && next != 0; n++ {
			if n >= maxThreads {
				return 0, fmt.Errorf("thread list at %#x: more than %d entries (torn?)", head, maxThreads)
			}
			pd := next - g.pthreadList
			var b [4]byte
			if _, err := mem.ReadAt(b[:], int64(pd+g.pthreadTID)); err != nil {
				return 0, fmt.Errorf("read tid of thread descriptor %#x: %w", pd, err)
			}
			if int(int32(binary.LittleEndian.Uint32(b[:]))) == tid {
				self, err := readU64(mem, pd+g.pthreadSelf)
				if err != nil {
					return 0, fmt.Errorf("read TCB of thread %d: %w", tid, err)
				}
				if self != pd {
					return 0, fmt.Errorf("thread descriptor %#x of thread %d: tcbhead.self is %#x", pd, tid, self)
				}
				return pd, nil
			}
			if next, err = readU64(mem, next); err != nil {
				return 0, fmt.Errorf("walk thread list: %w", err)
			}
		}
	}
	return 0, fmt.Errorf("thread %d is not on glibc's thread lists", tid)
}
