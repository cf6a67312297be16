//go:build rotanext

package contract

import "fmt"

// This file is the test build of the next annotation version (go build
// -tags rotanext): it writes v2, reads v1 and v2 strictly and v3
// leniently, and adds one optional field to every document, "writer", so
// that a rolling upgrade (and a rollback) between a release build and this
// one can be exercised. It is not released.

// Version is the version written into every annotation document Rota writes.
const Version = "v2"

// NextVersion is the version the next Rota writes. This build reads its
// documents leniently: fields it does not know are ignored (versions.go).
const NextVersion = "v3"

// SupportedVersions lists the annotation versions this build reads
// strictly: its own and the older ones it still supports.
var SupportedVersions = []string{"v1", Version}

// Preview holds the optional fields this build adds to every document. It
// is embedded in each document type; a v1 document has none of them.
type Preview struct {
	// Writer says which build wrote the document; informational.
	Writer *Writer `json:"writer,omitempty"`
}

// Writer names the build that wrote a document.
type Writer struct {
	Build string `json:"build"`
}

// WriterBuild is the build this one writes into Writer.
const WriterBuild = "next"

// maxWriterBuildBytes bounds Writer.Build.
const maxWriterBuildBytes = 64

// check checks the preview fields of the document doc of version v.
func (p Preview) check(doc, v string) error {
	if p.Writer == nil {
		return nil
	}
	if v == "v1" {
		return fieldErr(doc+".writer", nil, "is not part of a v1 document", fmt.Sprintf("write version %q, or leave writer out", Version))
	}
	if p.Writer.Build == "" {
		return fieldErr(doc+".writer.build", nil, "is empty", "name the build that wrote the document")
	}
	if len(p.Writer.Build) > maxWriterBuildBytes {
		return fieldErr(doc+".writer.build", fmt.Sprintf("%d bytes", len(p.Writer.Build)), "is too long",
			fmt.Sprintf("keep it under %d bytes", maxWriterBuildBytes))
	}
	return nil
}

// stamp fills the preview fields a writer of version v writes: the writer,
// in every document after v1 that does not name one yet.
func (p *Preview) stamp(v string) {
	if v != "v1" && p.Writer == nil {
		p.Writer = &Writer{Build: WriterBuild}
	}
}
