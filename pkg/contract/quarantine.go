package contract

import (
	"slices"
	"strings"
)

// ParseQuarantine reads a Node's QuarantineAnnotation value: whether the
// node itself is quarantined ("node"), the quarantined GPUs' UUIDs (sorted,
// without repeats), or release when an admin wrote QuarantineRelease to
// return it all. Blank entries are ignored.
func ParseQuarantine(v string) (node bool, gpus []string, release bool) {
	v = strings.TrimSpace(v)
	if v == QuarantineRelease {
		return false, nil, true
	}
	for part := range strings.SplitSeq(v, ",") {
		switch part = strings.TrimSpace(part); part {
		case "":
		case QuarantineNode:
			node = true
		default:
			gpus = append(gpus, part)
		}
	}
	slices.Sort(gpus)
	return node, slices.Compact(gpus), false
}

// FormatQuarantine writes the QuarantineAnnotation value ParseQuarantine
// reads ("" when nothing is quarantined).
func FormatQuarantine(node bool, gpus []string) string {
	parts := slices.Clone(gpus)
	if node {
		parts = append(parts, QuarantineNode)
	}
	slices.Sort(parts)
	return strings.Join(slices.Compact(parts), ",")
}
