package console

import (
	"context"
	"io"
	"net/http"
)

// fakeAPI stands in for the REST API a console calls: it answers each
// "METHOD /path" of routes, and any other request with the API's 404.
func fakeAPI(routes map[string]http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if h, ok := routes[r.Method+" "+r.URL.Path]; ok {
			h(w, r)
			return
		}
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"code":"not_found","message":"no"}`)
	})
}

// reply answers with status 200 and the JSON body.
func reply(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, body) }
}

// oneSession is a session store holding s, reached with the cookie value
// "cookie".
func oneSession(s ConsoleSession) *memSessions {
	sessions := &memSessions{m: map[string]ConsoleSession{}}
	s.IDHash = hashID("cookie")
	_ = sessions.InsertConsoleSession(context.Background(), s)
	return sessions
}
