// Package console is the server of `lockctl ui`: a web page on the loopback
// interface that shows the lock service's locks and semaphores live, and
// force releases a lease after a confirmation.
//
// The browser talks only to this server, never to the service: the server
// calls the service with the operator's own client (endpoint and SigV4 as
// lockctl's other commands), so the browser holds no AWS credentials. One
// refresher per listing serves every open tab (at most one listing request
// per Config.Interval, longer after a 429), and the service is watched only
// for names whose detail view is open. Tabs poll this server with short
// GETs, answered from that shared state, so that no tab holds one of the
// browser's few connections per host; a poll keeps its listing and its
// watch going for Config.Linger. See docs/console.md for what the page
// shows, its security model and its request rate.
package console
