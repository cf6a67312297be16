package report

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Event reasons the report reads.
const (
	// ReasonFailedScheduling is kube-scheduler's refusal, with the
	// extender's per-node reasons aggregated into its message.
	ReasonFailedScheduling = "FailedScheduling"
	// ReasonGPUUnschedulable is rota-extender's own refusal event.
	ReasonGPUUnschedulable = "GPUUnschedulable"
	// ReasonFailedCreate is a controller's event when the API server (here:
	// the admission webhook) refused a pod it tried to create.
	ReasonFailedCreate = "FailedCreate"
)

// Decision is a scheduling refusal read from an event.
type Decision struct {
	// Source is the component that reported it (kube-scheduler's
	// "default-scheduler", "rota-extender").
	Source string    `json:"source"`
	Reason string    `json:"reason"`
	Pod    string    `json:"pod"`
	Time   time.Time `json:"time"`
	Age    string    `json:"age"`
	Count  int32     `json:"count"`
	// Message is the event's message as written.
	Message string `json:"message"`
	// Nodes is N of "0/N nodes"; 0 when the message has no such prefix.
	Nodes int `json:"nodes,omitempty"`
	// Reasons splits the message's per-node reasons, most nodes first.
	Reasons []NodeReason `json:"reasons,omitempty"`
	// Preemption is kube-scheduler's preemption verdict, if any.
	Preemption string `json:"preemption,omitempty"`
}

// NodeReason is how many nodes gave one reason.
type NodeReason struct {
	Nodes  int    `json:"nodes"`
	Reason string `json:"reason"`
	// Example is a node that gave the reason, when the message names one.
	Example string `json:"example,omitempty"`
}

// eventTime is when an event was last seen.
func eventTime(e *corev1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.FirstTimestamp.IsZero():
		return e.FirstTimestamp.Time
	}
	return e.CreationTimestamp.Time
}

func eventCount(e *corev1.Event) int32 {
	if e.Series != nil && e.Series.Count > 0 {
		return e.Series.Count
	}
	return max(e.Count, 1)
}

func eventSource(e *corev1.Event) string {
	switch {
	case e.ReportingController != "":
		return e.ReportingController
	case e.Source.Component != "":
		return e.Source.Component
	}
	return "unknown"
}

// decisions returns the newest refusal of each reason on the given pods,
// newest first.
func (c *Cluster) decisions(pods []*corev1.Pod) []Decision {
	uids := map[string]string{}
	for _, p := range pods {
		uids[string(p.UID)] = podKey(p)
	}
	latest := map[string]*corev1.Event{}
	for i := range c.in.Events {
		e := &c.in.Events[i]
		if e.Reason != ReasonFailedScheduling && e.Reason != ReasonGPUUnschedulable {
			continue
		}
		if e.InvolvedObject.Kind != "" && e.InvolvedObject.Kind != "Pod" {
			continue
		}
		if _, ok := uids[string(e.InvolvedObject.UID)]; !ok {
			continue
		}
		if old := latest[e.Reason]; old == nil || eventTime(e).After(eventTime(old)) {
			latest[e.Reason] = e
		}
	}
	var out []Decision
	for _, e := range latest {
		d := Decision{Source: eventSource(e), Reason: e.Reason, Pod: uids[string(e.InvolvedObject.UID)],
			Time: eventTime(e), Age: c.age(eventTime(e)), Count: eventCount(e), Message: e.Message}
		d.Nodes, d.Reasons, d.Preemption = ParseNodeReasons(e.Message)
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b Decision) int {
		if c := b.Time.Compare(a.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Reason, b.Reason)
	})
	return out
}

var (
	// kube-scheduler: "0/20 nodes are available: 12 <reason>, 8 <reason>."
	// rota-extender: "0/20 nodes fit the GPU request: 12 like node-3: <reason>; 8 like ..."
	schedPrefix = regexp.MustCompile(`^0/(\d+) nodes are available: `)
	rotaPrefix  = regexp.MustCompile(`^0/(\d+) nodes fit the GPU request: `)
	// A count starts a reason: ", 12 " (kube-scheduler) or "; 12 like " (Rota).
	schedSplit = regexp.MustCompile(`, (\d+) `)
	rotaSplit  = regexp.MustCompile(`; (\d+) like `)
)

// ParseNodeReasons splits an aggregated refusal into its per-node reasons,
// most nodes first. It understands kube-scheduler's FailedScheduling message
// (which carries the extender's reasons) and rota-extender's GPUUnschedulable
// summary; other messages give total 0 and no reasons.
func ParseNodeReasons(msg string) (total int, reasons []NodeReason, preemption string) {
	var body string
	var split *regexp.Regexp
	lead := ""
	if m := schedPrefix.FindStringSubmatch(msg); m != nil {
		total, _ = strconv.Atoi(m[1])
		body, split = msg[len(m[0]):], schedSplit
		lead = ", "
		if i := strings.Index(body, " preemption: "); i >= 0 {
			preemption = strings.TrimSuffix(strings.TrimSpace(body[i+len(" preemption: "):]), ".")
			body = body[:i]
		}
		body = strings.TrimSuffix(strings.TrimSpace(body), ".")
	} else if m := rotaPrefix.FindStringSubmatch(msg); m != nil {
		total, _ = strconv.Atoi(m[1])
		body, split = msg[len(m[0]):], rotaSplit
		lead = "; "
		body = strings.TrimSuffix(body, "; and more")
	} else {
		return 0, nil, ""
	}
	// Put the separator in front so that every reason starts with one.
	body = lead + body
	locs := split.FindAllStringSubmatchIndex(body, -1)
	for i, loc := range locs {
		end := len(body)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		n, _ := strconv.Atoi(body[loc[2]:loc[3]])
		nr := NodeReason{Nodes: n, Reason: body[loc[1]:end]}
		if split == rotaSplit {
			if node, text, ok := strings.Cut(nr.Reason, ": "); ok {
				nr.Example, nr.Reason = node, text
			}
		}
		reasons = append(reasons, nr)
	}
	slices.SortStableFunc(reasons, func(a, b NodeReason) int { return b.Nodes - a.Nodes })
	return total, reasons, preemption
}

type rejection struct {
	count int32
	msg   string
	at    time.Time
}

// rejections reads controllers' FailedCreate events whose message is an
// admission webhook's quota refusal, per team (from "team NAME:" in the
// message, else the namespace's team).
func (c *Cluster) rejections() map[string]rejection {
	out := map[string]rejection{}
	for i := range c.in.Events {
		e := &c.in.Events[i]
		if e.Reason != ReasonFailedCreate || !strings.Contains(e.Message, "denied the request") {
			continue
		}
		team := c.nsLabels[e.Namespace][c.o.Names.TeamLabel]
		if m := teamInMsg.FindStringSubmatch(e.Message); m != nil {
			team = m[1]
		}
		r := out[team]
		r.count += eventCount(e)
		if t := eventTime(e); t.After(r.at) {
			r.at, r.msg = t, e.Message
			if i := strings.Index(r.msg, "denied the request: "); i >= 0 {
				r.msg = r.msg[i+len("denied the request: "):]
			}
		}
		out[team] = r
	}
	return out
}

var teamInMsg = regexp.MustCompile(`denied the request: team ([A-Za-z0-9][-A-Za-z0-9_.]*):`)
