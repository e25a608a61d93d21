package e2e

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// socketSample is one look at the TCP connections between the daemon and
// its Nomad's HTTP port, from the kernel's side (/proc/net/tcp).
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
	stop      chan struct{}
	done      chan struct{}

	mu      sync.Mutex
	samples []socketSample
	err     error
}

// sampleSockets starts sampling, every `every`, the connections process
// pid holds to 127.0.0.1:port.
func sampleSockets(pid, port int, every time.Duration) *socketSampler {
	s := &socketSampler{pid: pid, port: port, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			sample, err := s.look()
			s.mu.Lock()
			if err != nil && s.err == nil {
				s.err = err
			}
			if err == nil {
				s.samples = append(s.samples, sample)
			}
			s.mu.Unlock()
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// Stop ends the sampling and returns what it saw, or the first error.
func (s *socketSampler) Stop() ([]socketSample, error) {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples, s.err
}

// look takes one sample.
func (s *socketSampler) look() (socketSample, error) {
	at := time.Now()
	inodes, err := socketInodes(s.pid)
	if err != nil {
		return socketSample{}, err
	}
	conns, err := readProcNetTCP("/proc/net/tcp")
	if err != nil {
		return socketSample{}, err
	}
	sample := socketSample{at: at}
	// The daemon's ends: local ports whose remote is Nomad's port.
	daemonPorts := map[int]bool{}
	for _, c := range conns {
		if c.remotePort == s.port && inodes[c.inode] {
			daemonPorts[c.localPort] = true
			sample.unread = max(sample.unread, c.rxQueue)
		}
	}
	for _, c := range conns {
		if c.localPort == s.port && daemonPorts[c.remotePort] {
			sample.unsent = max(sample.unsent, c.txQueue)
		}
	}
	return sample, nil
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

// tcpConn is one line of /proc/net/tcp.
type tcpConn struct {
	localPort, remotePort int
	txQueue, rxQueue      uint64
	inode                 uint64
}

// readProcNetTCP parses a /proc/net/tcp table: "sl local_address
// rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
// ...", addresses as hex IP:port, queues in hex.
func readProcNetTCP(path string) ([]tcpConn, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading the kernel's TCP table: %w", err)
	}
	defer f.Close()
	var out []tcpConn
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		c, err := parseProcNetTCPLine(sc.Text())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, c)
	}
	return out, sc.Err()
}

func parseProcNetTCPLine(line string) (tcpConn, error) {
	f := strings.Fields(line)
	if len(f) < 10 {
		return tcpConn{}, fmt.Errorf("line %q has %d fields, want at least 10", line, len(f))
	}
	port := func(addr string) (int, error) {
		_, p, ok := strings.Cut(addr, ":")
		if !ok {
			return 0, fmt.Errorf("address %q has no port", addr)
		}
		n, err := strconv.ParseUint(p, 16, 16)
		return int(n), err
	}
	var c tcpConn
	var err error
	if c.localPort, err = port(f[1]); err != nil {
		return c, err
	}
	if c.remotePort, err = port(f[2]); err != nil {
		return c, err
	}
	tx, rx, ok := strings.Cut(f[4], ":")
	if !ok {
		return c, fmt.Errorf("queues %q are not tx:rx", f[4])
	}
	if c.txQueue, err = strconv.ParseUint(tx, 16, 64); err != nil {
		return c, err
	}
	if c.rxQueue, err = strconv.ParseUint(rx, 16, 64); err != nil {
		return c, err
	}
	if c.inode, err = strconv.ParseUint(f[9], 10, 64); err != nil {
		return c, err
	}
	return c, nil
}

// socketPeaks returns the most unread and unsent bytes of the samples in
// [from, to], and how many samples that was.
func socketPeaks(samples []socketSample, from, to time.Time) (unread, unsent uint64, n int) {
	for _, s := range samples {
		if s.at.Before(from) || s.at.After(to) {
			continue
		}
		unread, unsent, n = max(unread, s.unread), max(unsent, s.unsent), n+1
	}
	return unread, unsent, n
}

func TestParseProcNetTCPLine(t *testing.T) {
	line := "   3: 0100007F:A3F2 0100007F:1F90 01 0000002A:00010000 00:00000000 00000000  1000        0 4242 1 0000000000000000 20 4 30 10 -1"
	c, err := parseProcNetTCPLine(line)
	if err != nil {
		t.Fatal(err)
	}
	want := tcpConn{localPort: 0xA3F2, remotePort: 8080, txQueue: 42, rxQueue: 65536, inode: 4242}
	if c != want {
		t.Fatalf("parsed %+v, want %+v", c, want)
	}
	for _, bad := range []string{"", "0: 0100007F 0100007F:1F90 01 0:0 0 0 0 0 1", "0: 0100007F:1 0100007F:1F90 01 00 0 0 0 0 1"} {
		if _, err := parseProcNetTCPLine(bad); err == nil {
			t.Errorf("parseProcNetTCPLine(%q) succeeded, want an error", bad)
		}
	}
}

func TestSocketSamplerSeesUnreadBytes(t *testing.T) {
	// This process's own connection to itself: bytes written and not read
	// are the reader's rx_queue.
	ln, port, conn, peer := loopbackPair(t)
	defer ln.Close()
	defer conn.Close()
	defer peer.Close()
	if _, err := peer.Write(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	s := &socketSampler{pid: os.Getpid(), port: port}
	deadline := time.Now().Add(5 * time.Second)
	for {
		sample, err := s.look()
		if err != nil {
			t.Fatal(err)
		}
		if sample.unread == 1000 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sampler saw %d unread bytes on the connection to port %d, want 1000", sample.unread, port)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// loopbackPair returns a listener on 127.0.0.1, its port, a connection
// dialed to it and the listener's end of that connection.
func loopbackPair(t *testing.T) (net.Listener, int, net.Conn, net.Conn) {
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
