package scheduling

import (
	"container/list"
	"slices"
	"sync"
	"time"

	"github.com/rota-sched/rota/pkg/placement"
)

// Decision is one verb's answer for one pod, as /debug/pods shows it.
type Decision struct {
	Time    time.Time `json:"time"`
	Verb    string    `json:"verb"`
	Outcome string    `json:"outcome"`
	// Nodes is how many nodes were asked about; Fits how many fit.
	Nodes int `json:"nodes,omitempty"`
	Fits  int `json:"fits,omitempty"`
	// Node is the node bound to, or a gang slot.
	Node    string `json:"node,omitempty"`
	Gang    string `json:"gang,omitempty"`
	Message string `json:"message,omitempty"`
	// Reasons groups the nodes that did not fit by reason code.
	Reasons []placement.ReasonCount `json:"reasons,omitempty"`
	// Classes groups prioritized nodes by score class, best first.
	Classes  []ScoreClass `json:"classes,omitempty"`
	Duration string       `json:"duration"`
}

// ScoreClass is how many nodes got one extender score.
type ScoreClass struct {
	Score       int64  `json:"score"`
	FineScore   int64  `json:"fineScore"`
	Nodes       int    `json:"nodes"`
	ExampleNode string `json:"exampleNode"`
}

const decisionsPerPod = 8

// decisionLog keeps the latest decisions of the most recently decided pods:
// at most max pods (least recently updated dropped first), each entry
// dropped ttl after its last update. Safe for concurrent use.
type decisionLog struct {
	mu    sync.Mutex
	max   int
	ttl   time.Duration
	ll    *list.List // front: most recent
	items map[string]*list.Element
}

type decisionEntry struct {
	key       string
	updated   time.Time
	decisions []Decision
	lastEvent time.Time
	lastMsg   string
}

func newDecisionLog(max int, ttl time.Duration) *decisionLog {
	return &decisionLog{max: max, ttl: ttl, ll: list.New(), items: map[string]*list.Element{}}
}

func (l *decisionLog) entry(key string, now time.Time) *decisionEntry {
	if el, ok := l.items[key]; ok {
		en := el.Value.(*decisionEntry)
		if now.Sub(en.updated) > l.ttl {
			en.decisions, en.lastMsg, en.lastEvent = nil, "", time.Time{}
		}
		en.updated = now
		l.ll.MoveToFront(el)
		return en
	}
	en := &decisionEntry{key: key, updated: now}
	l.items[key] = l.ll.PushFront(en)
	for l.ll.Len() > l.max {
		last := l.ll.Back()
		l.ll.Remove(last)
		delete(l.items, last.Value.(*decisionEntry).key)
	}
	return en
}

func (l *decisionLog) add(key string, d Decision) {
	if l.max <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	en := l.entry(key, d.Time)
	if len(en.decisions) == decisionsPerPod {
		en.decisions = slices.Delete(en.decisions, 0, 1)
	}
	en.decisions = append(en.decisions, d)
}

func (l *decisionLog) get(key string, now time.Time) []Decision {
	l.mu.Lock()
	defer l.mu.Unlock()
	el, ok := l.items[key]
	if !ok {
		return nil
	}
	en := el.Value.(*decisionEntry)
	if now.Sub(en.updated) > l.ttl {
		l.ll.Remove(el)
		delete(l.items, key)
		return nil
	}
	return slices.Clone(en.decisions)
}

// refusedFor returns the pods (namespace/name) whose latest decision is a
// filter that fit no node with code among its reasons, most recently
// decided first, at most max of them.
func (l *decisionLog) refusedFor(code placement.Code, now time.Time, max int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for el := l.ll.Front(); el != nil && len(out) < max; el = el.Next() {
		en := el.Value.(*decisionEntry)
		if now.Sub(en.updated) > l.ttl || len(en.decisions) == 0 {
			continue
		}
		d := en.decisions[len(en.decisions)-1]
		if d.Verb == "filter" && d.Outcome == "nofit" && slices.ContainsFunc(d.Reasons, func(r placement.ReasonCount) bool { return r.Code == code }) {
			out = append(out, en.key)
		}
	}
	return out
}

// shouldEmit reports whether a refusal event with msg is due for the pod:
// the message changed, or a minute passed since the last one.
func (l *decisionLog) shouldEmit(key, msg string, now time.Time) bool {
	if l.max <= 0 {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	en := l.entry(key, now)
	if en.lastMsg == msg && now.Sub(en.lastEvent) < time.Minute {
		return false
	}
	en.lastMsg, en.lastEvent = msg, now
	return true
}
