//go:build !rotanext

package contract

// Version is the version written into every annotation document Rota writes.
const Version = "v1"

// NextVersion is the version the next Rota writes. This build reads its
// documents leniently: fields it does not know are ignored (versions.go).
const NextVersion = "v2"

// SupportedVersions lists the annotation versions this build reads
// strictly: its own and the older ones it still supports.
var SupportedVersions = []string{Version}

// Preview holds the optional fields that the test build of the next
// version (build tag rotanext, version_next.go) adds to every document, so
// that a rolling upgrade between the two builds can be exercised. It is
// embedded in each document type, and empty in this build: a document of
// NextVersion that carries those fields is read without them.
type Preview struct{}

// check checks the preview fields of a document of version v.
func (Preview) check(string, string) error { return nil }

// stamp fills the preview fields a writer of version v writes.
func (*Preview) stamp(string) {}
