package tunnel

import (
	"context"
	"io"
	"net"
	"time"
)

// Splice copies both ways between a and b until either side ends (or ctx
// does), then closes both: a local connection carried to a Mac by a tunnel
// or directly. The side that ended first half-closes the other, which then
// gets a second to drain what it still had to say.
func Splice(ctx context.Context, a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	select {
	case <-done:
	case <-ctx.Done():
	}
	select {
	case <-done:
	case <-time.After(time.Second):
	case <-ctx.Done():
	}
	_ = a.Close()
	_ = b.Close()
}
