package queue

import (
	"encoding/json"
	"net/http"
)

// Handler serves GET /debug/queue[?team=T]. leading says whether this
// replica runs the controller (nil: always).
func (c *Controller) Handler(leading func() bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := c.View(leading == nil || leading())
		if t := r.URL.Query().Get("team"); t != "" {
			teams, pods := v.Teams, v.Pods
			v.Teams, v.Pods = nil, nil
			for _, ts := range teams {
				if ts.Team == t {
					v.Teams = append(v.Teams, ts)
				}
			}
			for _, p := range pods {
				if p.Team == t {
					v.Pods = append(v.Pods, p)
				}
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	})
}
