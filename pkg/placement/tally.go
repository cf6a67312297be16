package placement

import (
	"slices"
	"strconv"
	"strings"
)

// ReasonCount is how many nodes failed for one reason code, with an example.
type ReasonCount struct {
	Code        Code   `json:"code"`
	Resolvable  bool   `json:"resolvable"`
	Nodes       int    `json:"nodes"`
	ExampleNode string `json:"exampleNode,omitempty"`
	Example     string `json:"example"`
}

// Tally groups the nodes a request did not fit by reason code, keeping the
// first message of each as its example. The zero value is empty.
type Tally struct{ rs []ReasonCount }

// Add counts node under r's code; msg is asked only for a code's first node.
func (t *Tally) Add(r *Reason, node string, msg func() string) {
	t.AddNodes(r.Code, r.Resolvable, node, msg, 1)
}

// AddText counts node under code with a message of the caller's.
func (t *Tally) AddText(code Code, resolvable bool, node, msg string) {
	t.AddNodes(code, resolvable, node, func() string { return msg }, 1)
}

// AddNodes counts n nodes under code, node being one of them.
func (t *Tally) AddNodes(code Code, resolvable bool, node string, msg func() string, n int) {
	for i := range t.rs {
		if t.rs[i].Code == code && t.rs[i].Resolvable == resolvable {
			t.rs[i].Nodes += n
			return
		}
	}
	t.rs = append(t.rs, ReasonCount{Code: code, Resolvable: resolvable, Nodes: n, ExampleNode: node, Example: msg()})
}

// Counts are the counts in the order their codes first came.
func (t *Tally) Counts() []ReasonCount { return t.rs }

// Sorted returns the counts, most nodes first (equal ones in the order
// their codes came).
func (t *Tally) Sorted() []ReasonCount {
	slices.SortStableFunc(t.rs, func(a, b ReasonCount) int { return b.Nodes - a.Nodes })
	return t.rs
}

// Summary is the refusal in one line: "0/5000 nodes fit the GPU request:
// 4000 like node-12: GPU 3 has 18 GiB free, pod needs 40 GiB; 1000 like
// ...", at most four codes named.
func (t *Tally) Summary(total int) string {
	var b strings.Builder
	b.WriteString("0/")
	b.WriteString(strconv.Itoa(total))
	b.WriteString(" nodes fit the GPU request")
	for i, r := range t.Sorted() {
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
