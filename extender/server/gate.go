package server

import (
	"net/http"
	"time"

	"github.com/julienschmidt/httprouter"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// gate refuses the verb while Options.Serving says this replica may not
// serve, in the verb's own error form (Error in the result for filter and
// bind, HTTP 503 for prioritize and preempt), which the scheduler treats as
// a failed attempt and retries. The answer closes the connection: a
// kept-alive connection of the scheduler would otherwise stay on this
// replica, and the next one it opens goes where the Service routes now (the
// leader). /readyz does not ask Serving: a standby whose ledger is rebuilt
// is ready to take over.
func (s *Server) gate(verb string, h httprouter.Handle) httprouter.Handle {
	if s.o.Serving == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		err := s.o.Serving()
		if err == nil {
			h(w, r, ps)
			return
		}
		defer s.observe(verb, time.Now())
		if s.o.Metrics != nil {
			s.o.Metrics.Decisions.WithLabelValues(verb, "error", "Standby").Inc()
		}
		s.o.Logger.V(2).Info("Verb refused", "verb", verb, "err", err)
		w.Header().Set("Connection", "close")
		switch verb {
		case "filter":
			writeJSON(w, http.StatusOK, &extenderv1.ExtenderFilterResult{Error: err.Error()})
		case "bind":
			writeJSON(w, http.StatusOK, &extenderv1.ExtenderBindingResult{Error: err.Error()})
		default:
			http.Error(w, verb+": "+err.Error(), http.StatusServiceUnavailable)
		}
	}
}
