package contract

import (
	"errors"
	"fmt"
	"strings"
)

// FieldError says which field of a document is wrong, what is wrong with the
// value, and what to write instead. Every parser in Rota returns these.
type FieldError struct {
	Field   string // JSON path, e.g. "gpus[3].peers[0]"
	Value   string // the offending value, printed as given
	Problem string // "is negative"
	Fix     string // "write the GPU memory in MiB, for example 81920"
}

func (e *FieldError) Error() string {
	var b strings.Builder
	b.WriteString(e.Field)
	b.WriteString(": ")
	if e.Value != "" {
		fmt.Fprintf(&b, "%q ", e.Value)
	}
	b.WriteString(e.Problem)
	if e.Fix != "" {
		b.WriteString("; ")
		b.WriteString(e.Fix)
	}
	return b.String()
}

// fieldErr is shorthand used by the validators of this package.
func fieldErr(field string, value any, problem, fix string) *FieldError {
	v := ""
	switch x := value.(type) {
	case nil:
	case MiB:
		// As written in the document (a number of MiB), not "80 GiB".
		v = fmt.Sprint(int64(x))
	default:
		v = fmt.Sprint(value)
	}
	return &FieldError{Field: field, Value: v, Problem: problem, Fix: fix}
}

// ErrUnsupportedVersion is wrapped by errors about annotation versions this
// build cannot read.
var ErrUnsupportedVersion = errors.New("unsupported annotation version")
