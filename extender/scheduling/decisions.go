package scheduling

import (
	"container/list"
	"slices"
	"strconv"
	"strings"
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
	Reasons []ReasonCount `json:"reasons,omitempty"`
	// Classes groups prioritized nodes by score class, best first.
	Classes  []ScoreClass `json:"classes,omitempty"`
	Duration string       `json:"duration"`
}

// ReasonCount is how many nodes failed for one reason code, with an example.
type ReasonCount struct {
	Code        placement.Code `json:"code"`
	Resolvable  bool           `json:"resolvable"`
	Nodes       int            `json:"nodes"`
	ExampleNode string         `json:"exampleNode,omitempty"`
	Example     string         `json:"example"`
}

// ScoreClass is how many nodes got one extender score.
type ScoreClass struct {
	Score       int64  `json:"score"`
	FineScore   int64  `json:"fineScore"`
	Nodes       int    `json:"nodes"`
	ExampleNode string `json:"exampleNode"`
}

// reasonTally groups failures by code while filter runs.
type reasonTally struct{ rs []ReasonCount }

func (t *reasonTally) add(r *placement.Reason, node string, msg func() string) {
	for i := range t.rs {
		if t.rs[i].Code == r.Code && t.rs[i].Resolvable == r.Resolvable {
			t.rs[i].Nodes++
			return
		}
	}
	t.rs = append(t.rs, ReasonCount{Code: r.Code, Resolvable: r.Resolvable, Nodes: 1, ExampleNode: node, Example: msg()})
}

func (t *reasonTally) addText(code placement.Code, resolvable bool, node, msg string) {
	t.add(&placement.Reason{Code: code, Resolvable: resolvable}, node, func() string { return msg })
}

// sorted returns the counts, most nodes first.
func (t *reasonTally) sorted() []ReasonCount {
	slices.SortStableFunc(t.rs, func(a, b ReasonCount) int { return b.Nodes - a.Nodes })
	return t.rs
}

// summary is the refusal in one line: "0/5000 nodes fit: 4000 x GPU 3 has
// 18 GiB free, pod needs 40 GiB (node-12); 1000 x ...".
func (t *reasonTally) summary(total int) string {
	var b strings.Builder
	b.WriteString("0/")
	b.WriteString(strconv.Itoa(total))
	b.WriteString(" nodes fit the GPU request")
	for i, r := range t.sorted() {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(strconv.Itoa(r.Nodes))
		b.WriteString(" like ")
		b.WriteString(r.ExampleNode)
		b.WriteString(": ")
		b.WriteString(r.Example)
		if i == 3 && len(t.rs) > 4 {
			b.WriteString("; and more")
			break
		}
	}
	return b.String()
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
