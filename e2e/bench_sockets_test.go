package e2e

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// socketSample is one look at the TCP connections between the daemon and
// its Nomad's HTTP port, from the kernel's side (sock_diag).
//
// It tells which side of a lost event stream fell behind. Nomad drops a
// subscriber whose next event left its buffer; its HTTP handler writes
// each event to the connection as soon as it has encoded it. Bytes that
// reached the daemon's socket and wait there (unread) are the daemon
// being slow to read; bytes Nomad wrote that the daemon's kernel has not
// taken (unsent) are the same, with the socket's buffer full. With both
// near zero while the stream trails, Nomad had not encoded the events
// yet: its own handler was behind, which no reader can help.
type socketSample struct {
	at time.Time
	// unread is the most bytes any of the daemon's connections to Nomad
	// held received but not yet read by the daemon (rx_queue).
	unread uint64
	// unsent is the most bytes Nomad's end of one of those connections
	// held written but not yet taken by the daemon's end (tx_queue).
	unsent uint64
}

// socketSampler samples the daemon's connections to one port until stopped.
type socketSampler struct {
	pid, port int
	// stopPolling ends sampleSockets' polling.
	stopPolling func()

	// diag is the sampler's sock_diag socket; its goroutine's alone.
	diag int
	// pairs are the daemon's connections to the port, both ends, as of
	// refreshed: one full listing a second, an exact lookup of each end
	// at every sample (a listing walks the kernel's whole connection
	// table, about 2 ms of kernel time on this machine).
	pairs     [][2]tcpConn
	refreshed time.Time
	// req and answer are ask's buffers, kept: a sample asks twice per
	// connection, and fresh buffers were 2.6 MB of garbage a sample.
	req    [nlmsgHeaderLength + inetDiagReqV2Len]byte
	answer [64 << 10]byte

	mu      sync.Mutex
	samples []socketSample
	err     error
}

// refreshPairsEvery is how often the sampler lists the machine's
// connections to find the daemon's.
const refreshPairsEvery = time.Second

// newSocketSampler returns a sampler of the connections process pid
// holds to 127.0.0.1:port; Close releases it.
func newSocketSampler(pid, port int) (*socketSampler, error) {
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, netlinkInetDiag)
	if err != nil {
		return nil, fmt.Errorf("opening a sock_diag socket: %w", err)
	}
	return &socketSampler{pid: pid, port: port, diag: fd}, nil
}

// Close releases the sampler's socket.
func (s *socketSampler) Close() { syscall.Close(s.diag) }

// sampleSockets starts sampling, every `every`, the connections process
// pid holds to 127.0.0.1:port, until Stop.
func sampleSockets(pid, port int, every time.Duration) (*socketSampler, error) {
	s, err := newSocketSampler(pid, port)
	if err != nil {
		return nil, err
	}
	s.stopPolling = pollUntilStopped(every, func() {
		sample, err := s.look()
		s.mu.Lock()
		defer s.mu.Unlock()
		if err != nil {
			s.err = cmp.Or(s.err, err)
			return
		}
		s.samples = append(s.samples, sample)
	})
	return s, nil
}

// Stop ends the sampling, releases the sampler and returns what it saw,
// or the first error.
func (s *socketSampler) Stop() ([]socketSample, error) {
	s.stopPolling()
	s.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples, s.err
}

// look takes one sample.
func (s *socketSampler) look() (socketSample, error) {
	at := time.Now()
	if at.Sub(s.refreshed) >= refreshPairsEvery {
		if err := s.refresh(); err != nil {
			return socketSample{}, err
		}
		s.refreshed = at
	}
	sample := socketSample{at: at}
	for _, pair := range s.pairs {
		// A connection closed since the listing is not there: skipped.
		if c, ok, err := s.lookup(pair[0]); err != nil {
			return sample, err
		} else if ok {
			sample.unread = max(sample.unread, c.rxQueue)
		}
		if c, ok, err := s.lookup(pair[1]); err != nil {
			return sample, err
		} else if ok {
			sample.unsent = max(sample.unsent, c.txQueue)
		}
	}
	return sample, nil
}

// refresh finds the daemon's connections to the port, and Nomad's ends
// of them.
func (s *socketSampler) refresh() error {
	inodes, err := socketInodes(s.pid)
	if err != nil {
		return err
	}
	conns, err := s.dump()
	if err != nil {
		return err
	}
	nomadEnds := map[int]tcpConn{} // by the daemon's port
	for _, c := range conns {
		if c.localPort == s.port {
			nomadEnds[c.remotePort] = c
		}
	}
	s.pairs = s.pairs[:0]
	for _, c := range conns {
		if n, ok := nomadEnds[c.localPort]; ok && c.remotePort == s.port && inodes[c.inode] {
			s.pairs = append(s.pairs, [2]tcpConn{c, n})
		}
	}
	return nil
}

// socketInodes returns the inodes of the sockets process pid has open.
func socketInodes(pid int) (map[uint64]bool, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("listing the daemon's open files: %w", err)
	}
	inodes := map[uint64]bool{}
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed since the listing
		}
		if rest, ok := strings.CutPrefix(target, "socket:["); ok {
			if n, err := strconv.ParseUint(strings.TrimSuffix(rest, "]"), 10, 64); err == nil {
				inodes[n] = true
			}
		}
	}
	return inodes, nil
}

// tcpConn is one established TCP connection, as the kernel's socket
// diagnostics report it.
type tcpConn struct {
	localAddr, remoteAddr [4]byte
	localPort, remotePort int
	// txQueue is the bytes written and not yet acknowledged by the peer,
	// rxQueue the bytes received and not yet read.
	txQueue, rxQueue uint64
	inode            uint64
}

// Linux's sock_diag netlink protocol (linux/sock_diag.h, inet_diag.h).
const (
	netlinkInetDiag   = 4  // NETLINK_INET_DIAG (NETLINK_SOCK_DIAG)
	sockDiagByFamily  = 20 // SOCK_DIAG_BY_FAMILY
	tcpEstablished    = 1
	inetDiagReqV2Len  = 56 // struct inet_diag_req_v2
	inetDiagMsgLen    = 72 // struct inet_diag_msg
	nlmsgHeaderLength = 16
)

// dump lists the machine's established IPv4 TCP connections through
// sock_diag. Reading /proc/net/tcp, which says the same, cost 7 ms of
// kernel time with 260 sockets; a dump walks the same table in about
// 2 ms. Either, every 10 ms, would take a core from the Nomad being
// measured, so the sampler dumps once a second (refresh).
func (s *socketSampler) dump() ([]tcpConn, error) {
	var conns []tcpConn
	err := s.ask(syscall.NLM_F_REQUEST|syscall.NLM_F_DUMP, 1<<tcpEstablished, tcpConn{}, func(c tcpConn) { conns = append(conns, c) })
	return conns, err
}

// lookup asks sock_diag for one connection by its addresses and ports:
// a hash lookup, not a walk of the table. ok is false when it is gone.
func (s *socketSampler) lookup(c tcpConn) (_ tcpConn, ok bool, err error) {
	var found tcpConn
	err = s.ask(syscall.NLM_F_REQUEST, ^uint32(0), c, func(got tcpConn) { found, ok = got, true })
	if errors.Is(err, syscall.ENOENT) {
		return tcpConn{}, false, nil
	}
	return found, ok, err
}

// ask sends one inet_diag_req_v2 for IPv4 TCP sockets in states (a bit
// per TCP state), naming the socket id when flags has no NLM_F_DUMP, and
// hands each socket of the answer to each.
func (s *socketSampler) ask(flags uint16, states uint32, id tcpConn, each func(tcpConn)) error {
	req := s.req[:]
	clear(req)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], sockDiagByFamily)
	binary.NativeEndian.PutUint16(req[6:], flags)
	binary.NativeEndian.PutUint32(req[8:], 1) // sequence
	body := req[nlmsgHeaderLength:]
	body[0], body[1] = syscall.AF_INET, syscall.IPPROTO_TCP
	binary.NativeEndian.PutUint32(body[4:], states)
	if flags&syscall.NLM_F_DUMP == 0 {
		// struct inet_diag_sockid at 8: ports, addresses, interface and a
		// cookie of all ones (INET_DIAG_NOCOOKIE).
		binary.BigEndian.PutUint16(body[8:], uint16(id.localPort))
		binary.BigEndian.PutUint16(body[10:], uint16(id.remotePort))
		copy(body[12:16], id.localAddr[:])
		copy(body[28:32], id.remoteAddr[:])
		binary.NativeEndian.PutUint64(body[48:], ^uint64(0))
	}
	if err := syscall.Sendto(s.diag, req, 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return fmt.Errorf("asking sock_diag for TCP sockets: %w", err)
	}
	buf := s.answer[:]
	for {
		n, _, err := syscall.Recvfrom(s.diag, buf, 0)
		if err != nil {
			return fmt.Errorf("reading sock_diag's answer: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return fmt.Errorf("parsing sock_diag's answer: %w", err)
		}
		for _, m := range msgs {
			switch m.Header.Type {
			case syscall.NLMSG_DONE:
				return nil
			case syscall.NLMSG_ERROR:
				if len(m.Data) < 4 {
					return fmt.Errorf("sock_diag answered with a short error")
				}
				if errno := -int32(binary.NativeEndian.Uint32(m.Data)); errno != 0 {
					return fmt.Errorf("sock_diag: %w", syscall.Errno(errno))
				}
				return nil
			case sockDiagByFamily:
				c, err := parseInetDiagMsg(m.Data)
				if err != nil {
					return err
				}
				each(c)
				if flags&syscall.NLM_F_DUMP == 0 {
					return nil // an exact lookup has one answer, and no DONE
				}
			}
		}
	}
}

// parseInetDiagMsg reads a struct inet_diag_msg: family, state, timer,
// retrans (a byte each), the socket's id (ports big-endian at 4 and 6,
// addresses at 8 and 24, interface, cookie: 48 bytes), then expires, rqueue, wqueue,
// uid and inode (native 32-bit words).
func parseInetDiagMsg(b []byte) (tcpConn, error) {
	if len(b) < inetDiagMsgLen {
		return tcpConn{}, fmt.Errorf("a sock_diag message of %d bytes, want at least %d", len(b), inetDiagMsgLen)
	}
	c := tcpConn{
		localPort:  int(binary.BigEndian.Uint16(b[4:])),
		remotePort: int(binary.BigEndian.Uint16(b[6:])),
		rxQueue:    uint64(binary.NativeEndian.Uint32(b[56:])),
		txQueue:    uint64(binary.NativeEndian.Uint32(b[60:])),
		inode:      uint64(binary.NativeEndian.Uint32(b[68:])),
	}
	copy(c.localAddr[:], b[8:12])
	copy(c.remoteAddr[:], b[24:28])
	return c, nil
}

// backlogOver is how many bytes waiting (unread and unsent) count as a
// backlog: five or so events.
const backlogOver = 16 << 10

// socketSummary is what the samples of a window say.
type socketSummary struct {
	// samples is how many fell in the window.
	samples int
	// unread and unsent are the most bytes of either kind.
	unread, unsent uint64
	// longestBacklog is the longest stretch of samples in which the
	// daemon's connections held more than backlogOver bytes: how long the
	// daemon left Nomad's writes waiting. A reader that keeps up drains
	// each write within a sample.
	longestBacklog time.Duration
}

// summarizeSockets sums up the samples in [from, to].
func summarizeSockets(samples []socketSample, from, to time.Time) socketSummary {
	var sum socketSummary
	var since time.Time
	for _, s := range samples {
		if s.at.Before(from) || s.at.After(to) {
			continue
		}
		sum.samples++
		sum.unread, sum.unsent = max(sum.unread, s.unread), max(sum.unsent, s.unsent)
		if s.unread+s.unsent <= backlogOver {
			since = time.Time{}
			continue
		}
		if since.IsZero() {
			since = s.at
		}
		sum.longestBacklog = max(sum.longestBacklog, s.at.Sub(since))
	}
	return sum
}

// String reads as a clause of the benchmark's progress lines.
func (s socketSummary) String() string {
	return fmt.Sprintf("%d samples: at most %d bytes unread by the daemon, %d unsent by Nomad; more than %d KiB waited for at most %v",
		s.samples, s.unread, s.unsent, backlogOver>>10, s.longestBacklog)
}

// writeSocketSamples writes samples to path, one a line: the time (RFC
// 3339, nanoseconds), the unread and the unsent bytes, tab-separated; to
// be laid beside the times of the daemon's logged stream losses.
func writeSocketSamples(b *testing.B, path string, samples []socketSample) {
	b.Helper()
	var out strings.Builder
	for _, s := range samples {
		fmt.Fprintf(&out, "%s\t%d\t%d\n", s.at.UTC().Format(time.RFC3339Nano), s.unread, s.unsent)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
		b.Fatal(err)
	}
}

func TestSummarizeSockets(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	samples := []socketSample{
		{at: at(0), unread: 20_000}, {at: at(10), unread: 0}, // drained within a sample
		{at: at(20), unsent: 30_000}, {at: at(30), unread: 10_000, unsent: 10_000}, {at: at(40), unread: 17_000}, {at: at(50)},
		{at: at(60), unread: 99_000}, {at: at(70), unread: 99_000},
	}
	for _, c := range []struct {
		from, to int
		want     socketSummary
	}{
		{0, 100, socketSummary{samples: 8, unread: 99_000, unsent: 30_000, longestBacklog: 20 * time.Millisecond}},
		{0, 10, socketSummary{samples: 2, unread: 20_000}},
		{15, 45, socketSummary{samples: 3, unread: 17_000, unsent: 30_000, longestBacklog: 20 * time.Millisecond}},
		{55, 100, socketSummary{samples: 2, unread: 99_000, longestBacklog: 10 * time.Millisecond}},
	} {
		if got := summarizeSockets(samples, at(c.from), at(c.to)); got != c.want {
			t.Errorf("summarizeSockets from %d ms to %d ms = %+v, want %+v", c.from, c.to, got, c.want)
		}
	}
}

func TestParseInetDiagMsg(t *testing.T) {
	b := make([]byte, inetDiagMsgLen)
	b[0], b[1] = syscall.AF_INET, tcpEstablished
	binary.BigEndian.PutUint16(b[4:], 0xA3F2)
	binary.BigEndian.PutUint16(b[6:], 8080)
	copy(b[8:], []byte{127, 0, 0, 1})
	copy(b[24:], []byte{127, 0, 0, 2})
	binary.NativeEndian.PutUint32(b[56:], 65536)
	binary.NativeEndian.PutUint32(b[60:], 42)
	binary.NativeEndian.PutUint32(b[68:], 4242)
	c, err := parseInetDiagMsg(b)
	if err != nil {
		t.Fatal(err)
	}
	want := tcpConn{localAddr: [4]byte{127, 0, 0, 1}, remoteAddr: [4]byte{127, 0, 0, 2}, localPort: 0xA3F2, remotePort: 8080, txQueue: 42, rxQueue: 65536, inode: 4242}
	if c != want {
		t.Fatalf("parsed %+v, want %+v", c, want)
	}
	if _, err := parseInetDiagMsg(b[:inetDiagMsgLen-1]); err == nil {
		t.Error("a short message parsed, want an error")
	}
}

// TestSocketSamplerSeesWaitingBytes: on this process's own loopback
// connection, with the dialed end standing for the daemon's and the
// accepted end for Nomad's, bytes written and not read are the daemon's
// unread; written past what its socket takes, they are Nomad's unsent.
func TestSocketSamplerSeesWaitingBytes(t *testing.T) {
	ln, port, conn, peer := loopbackPair(t)
	defer ln.Close()
	defer conn.Close()
	defer peer.Close()
	s, err := newSocketSampler(os.Getpid(), port)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// waitFor looks again until ok holds of a sample (the kernel moves
	// loopback bytes at once, but not within the write call).
	waitFor := func(what string, ok func(socketSample) bool) socketSample {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			sample, err := s.look()
			if err != nil {
				t.Fatal(err)
			}
			if ok(sample) {
				return sample
			}
			if time.Now().After(deadline) {
				t.Fatalf("the sampler saw %+v on the connection to port %d, want %s", sample, port, what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	if _, err := peer.Write(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	waitFor("1000 bytes unread and none unsent", func(s socketSample) bool { return s.unread == 1000 && s.unsent == 0 })

	// Write until the connection is full: the write stops at its deadline.
	if err := peer.SetWriteDeadline(time.Now().Add(500 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	n, err := peer.Write(make([]byte, 64<<20))
	if err == nil {
		t.Fatalf("wrote all %d bytes to a connection nobody reads", n)
	}
	sample := waitFor("bytes unsent once the daemon's end is full", func(s socketSample) bool { return s.unsent > 0 })
	if total := sample.unread + sample.unsent; total != uint64(1000+n) {
		t.Errorf("unread %d + unsent %d = %d bytes waiting, want the %d written", sample.unread, sample.unsent, total, 1000+n)
	}
}

// loopbackPair returns a listener on 127.0.0.1, its port, a connection
// dialed to it and the listener's end of that connection.
func loopbackPair(t testing.TB) (net.Listener, int, net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	return ln, ln.Addr().(*net.TCPAddr).Port, conn, peer
}

// BenchmarkSocketSample is what one sample costs the machine the
// benchmark measures: it runs every NSS_BENCH_SCALE_SOCKETS milliseconds,
// over the daemon's 16 workers' + 8 connections.
func BenchmarkSocketSample(b *testing.B) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	for range 24 {
		conn, err := net.Dial("tcp4", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		peer, err := ln.Accept()
		if err != nil {
			b.Fatal(err)
		}
		defer peer.Close()
	}
	s, err := newSocketSampler(os.Getpid(), ln.Addr().(*net.TCPAddr).Port)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if _, err := s.look(); err != nil {
		b.Fatal(err)
	}
	if len(s.pairs) != 24 {
		b.Fatalf("the sampler found %d connections, want 24", len(s.pairs))
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.look(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSampleSocketsUntilStopped: the benchmark's way in, sampling on its
// own until Stop, which hands back every sample.
func TestSampleSocketsUntilStopped(t *testing.T) {
	ln, port, conn, peer := loopbackPair(t)
	defer ln.Close()
	defer conn.Close()
	defer peer.Close()
	if _, err := peer.Write(make([]byte, 500)); err != nil {
		t.Fatal(err)
	}
	s, err := sampleSockets(os.Getpid(), port, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	samples, err := s.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) < 2 {
		t.Fatalf("%d samples in 100 ms at one a millisecond, want several", len(samples))
	}
	if sum := summarizeSockets(samples, samples[0].at, samples[len(samples)-1].at); sum.unread != 500 || sum.samples != len(samples) {
		t.Fatalf("over all %d samples: %v; want 500 bytes unread in every sample's count", len(samples), sum)
	}
}
