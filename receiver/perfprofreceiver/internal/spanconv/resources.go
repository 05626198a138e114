package spanconv

import (
	"container/list"
	"sync"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

// MaxResources bounds the distinct span resources remembered for the
// profiles. A resource holds its process.pid, so every process that sends
// spans brings a new one: past the bound, the resource interned least
// recently makes room, and the handles of its spans and process name none
// from then on (the process's next spans intern it again).
const MaxResources = 1 << resourceSlotBits

// resourceSlotBits are the low bits of a handle, its slot; the bits above
// count the slot's reuses, so that a handle a span or process kept from
// before its resource was evicted names none rather than the slot's new
// one. They wrap after 2^19 reuses of one slot, long after the spans
// (correlation.window) and the process names that held the old handle
// are gone.
const resourceSlotBits = 12

// resourceTable holds the span resources that profiles name by handle.
// Its methods may be called from any goroutine.
type resourceTable struct {
	mu    sync.Mutex
	slots []resourceSlot
	byKey map[string]int32 // slot of each resource's key
	lru   list.List        // slots, most recently interned first
}

type resourceSlot struct {
	key string
	res pcommon.Resource
	gen int32 // reuses of the slot
	el  *list.Element
}

// intern returns the handle of the resource of key, copying res into the
// table when it is not in it.
func (t *resourceTable) intern(key string, res pcommon.Resource) int32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if i, ok := t.byKey[key]; ok {
		s := &t.slots[i]
		t.lru.MoveToFront(s.el)
		return s.gen<<resourceSlotBits | i
	}
	if t.byKey == nil {
		t.byKey = map[string]int32{}
	}
	var i int32
	if len(t.slots) < MaxResources {
		i = int32(len(t.slots))
		t.slots = append(t.slots, resourceSlot{})
		t.slots[i].el = t.lru.PushFront(i)
	} else {
		el := t.lru.Back()
		i = el.Value.(int32)
		delete(t.byKey, t.slots[i].key)
		t.slots[i].gen = (t.slots[i].gen + 1) & (1<<(31-resourceSlotBits) - 1)
		t.lru.MoveToFront(el)
	}
	s := &t.slots[i]
	s.key = key
	s.res = pcommon.NewResource()
	res.CopyTo(s.res)
	t.byKey[key] = i
	return s.gen<<resourceSlotBits | i
}

// get returns the resource of handle h, and false for none: -1, or a
// resource evicted since.
func (t *resourceTable) get(h int32) (pcommon.Resource, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := h & (MaxResources - 1)
	if h < 0 || int(i) >= len(t.slots) || t.slots[i].gen != h>>resourceSlotBits {
		return pcommon.Resource{}, false
	}
	return t.slots[i].res, true
}

// len returns the number of resources held.
func (t *resourceTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byKey)
}
