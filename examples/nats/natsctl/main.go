// Command natsctl is a small NATS JetStream client for the tutorial in
// docs/tutorial-nats.md ("Running a replicated database"). It finds the members of the
// set the way any client of the cluster would: through Consul, from the
// service "nats" (CONSUL_HTTP_ADDR), or from NATS_URL when that is set.
// It authenticates as the members want it to: with the user and password
// of the Nomad Variable nomad/jobs/nats (items user and password, read
// with NOMAD_ADDR and NOMAD_TOKEN), or with NATS_USER and NATS_PASSWORD.
//
//	natsctl servers           the members: Consul's view and each server's own
//	natsctl meta-leader       the member that leads the JetStream meta group
//	natsctl add-stream NAME   a stream with three replicas on file storage (subjects NAME.>)
//	natsctl pub NAME COUNT    publish COUNT messages, each acknowledged by the stream
//	natsctl pub NAME -for 1m  publish for a while; say how long the longest wait was
//	natsctl stream NAME       the stream as its leader reports it: replicas, messages
//	natsctl read NAME         read every message back; say whether any is missing
//
// It is its own Go module (examples/nats/natsctl), so that the daemon's
// module does not depend on the NATS client; build it with
// `go build -C examples/nats/natsctl -o "$PWD/bin/natsctl" .` (make demo
// EXAMPLE=nats does).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const usage = `usage: natsctl <command>

  servers           the members: Consul's view and each server's own
  meta-leader       the member that leads the JetStream meta group
  add-stream NAME   a stream with three replicas on file storage (subjects NAME.>)
  pub NAME COUNT    publish COUNT messages to NAME.new, each acknowledged
                    (through elections; it gives up after 30s without an ack)
  pub NAME -for D   publish for the duration D (say 90s); report the longest wait
  stream NAME       the stream as its leader reports it
  read NAME         read every message back

Environment: CONSUL_HTTP_ADDR (127.0.0.1:8500), NATS_SERVICE (nats), and
NATS_URL to connect there instead of to the members Consul lists.
Credentials: the items user and password of the Nomad Variable NATS_VAR
(nomad/jobs/<NATS_SERVICE>), read with NOMAD_ADDR (http://127.0.0.1:4646),
NOMAD_TOKEN and NOMAD_NAMESPACE; or NATS_USER and NATS_PASSWORD when
NATS_USER is set (set but empty: connect without credentials).
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	args := os.Args[2:]
	switch os.Args[1] {
	case "servers":
		err = servers()
	case "meta-leader":
		err = metaLeader()
	case "add-stream":
		err = withName(args, addStream)
	case "pub":
		err = pub(args)
	case "stream":
		err = withName(args, streamInfo)
	case "read":
		err = withName(args, read)
	default:
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "natsctl:", err)
		os.Exit(1)
	}
}

func withName(args []string, f func(string) error) error {
	if len(args) != 1 {
		return errors.New("want one stream name")
	}
	return f(args[0])
}

// member is one instance of the service as Consul lists it.
type member struct {
	name    string // the daemon's per-ordinal tag, nats-<n>
	addr    string // host:port of the client port
	monitor string // host:port of the monitoring port (service meta "monitor")
	ready   string // Consul's checks: passing, warning or critical
}

func consulAddr() string {
	a := os.Getenv("CONSUL_HTTP_ADDR")
	if a == "" {
		a = "127.0.0.1:8500"
	}
	if !strings.Contains(a, "://") {
		a = "http://" + a
	}
	return a
}

// members lists the service's instances, ready or not, by name.
func members() ([]member, error) {
	svc := os.Getenv("NATS_SERVICE")
	if svc == "" {
		svc = "nats"
	}
	var entries []struct {
		Service struct {
			Tags    []string
			Address string
			Port    int
			Meta    map[string]string
		}
		Checks []struct{ Status string }
	}
	if err := getJSON(consulAddr()+"/v1/health/service/"+svc, &entries); err != nil {
		return nil, fmt.Errorf("asking Consul for the service %s: %w", svc, err)
	}
	var out []member
	for _, e := range entries {
		m := member{addr: fmt.Sprintf("%s:%d", e.Service.Address, e.Service.Port), monitor: e.Service.Meta["monitor"], ready: "passing"}
		if len(e.Service.Tags) > 0 {
			m.name = e.Service.Tags[0]
		}
		for _, c := range e.Checks {
			if c.Status == "critical" || (c.Status == "warning" && m.ready == "passing") {
				m.ready = c.Status
			}
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return ordinal(out[i].name) < ordinal(out[j].name) })
	return out, nil
}

func ordinal(name string) int {
	n, _ := strconv.Atoi(name[strings.LastIndexByte(name, '-')+1:])
	return n
}

func getJSON(url string, v any) error {
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var body struct {
			Error string `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return fmt.Errorf("%s: %s", resp.Status, body.Error)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func servers() error {
	ms, err := members()
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(w, "MEMBER\tCONSUL CHECK\tHEALTHZ\tSERVER NAME\tMETA LEADER\tCLUSTER SIZE\tMESSAGES")
	for _, m := range ms {
		healthz, name, leader, size, msgs := "-", "-", "-", "-", "-"
		if m.monitor != "" {
			var h struct{ Status, Error string }
			if err := getJSON("http://"+m.monitor+"/healthz", &h); err == nil {
				healthz = h.Status
			} else {
				healthz = "unavailable"
			}
			var v struct {
				Name string `json:"server_name"`
			}
			if getJSON("http://"+m.monitor+"/varz", &v) == nil {
				name = v.Name
			}
			var j struct {
				Messages uint64 `json:"messages"`
				Meta     *struct {
					Leader string `json:"leader"`
					Size   int    `json:"cluster_size"`
				} `json:"meta_cluster"`
			}
			if getJSON("http://"+m.monitor+"/jsz", &j) == nil {
				msgs = strconv.FormatUint(j.Messages, 10)
				if j.Meta != nil {
					size = strconv.Itoa(j.Meta.Size)
					if j.Meta.Leader != "" {
						leader = j.Meta.Leader
					}
				}
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.name, m.ready, healthz, name, leader, size, msgs)
	}
	return w.Flush()
}

// metaLeader prints the meta leader, as the first member that knows one
// reports it.
func metaLeader() error {
	ms, err := members()
	if err != nil {
		return err
	}
	for _, m := range ms {
		var j struct {
			Meta *struct {
				Leader string `json:"leader"`
			} `json:"meta_cluster"`
		}
		if m.monitor != "" && getJSON("http://"+m.monitor+"/jsz", &j) == nil && j.Meta != nil && j.Meta.Leader != "" {
			fmt.Println(j.Meta.Leader)
			return nil
		}
	}
	return errors.New("no member knows a meta leader")
}

// connect connects to NATS_URL, or to every member Consul lists.
func connect() (*nats.Conn, jetstream.JetStream, error) {
	url := os.Getenv("NATS_URL")
	if url == "" {
		ms, err := members()
		if err != nil {
			return nil, nil, err
		}
		var urls []string
		for _, m := range ms {
			urls = append(urls, "nats://"+m.addr)
		}
		if len(urls) == 0 {
			return nil, nil, errors.New("no member of the service is in Consul")
		}
		url = strings.Join(urls, ",")
	}
	opts := []nats.Option{nats.Name("natsctl"), nats.MaxReconnects(-1), nats.ReconnectWait(200 * time.Millisecond)}
	user, password, err := credentials()
	if err != nil {
		return nil, nil, err
	}
	if user != "" {
		opts = append(opts, nats.UserInfo(user, password))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// credentials are the user and password natsctl connects with: NATS_USER
// and NATS_PASSWORD when NATS_USER is set (an empty user: none at all),
// else the items user and password of the Nomad Variable that the members
// read theirs from.
func credentials() (user, password string, err error) {
	if u, ok := os.LookupEnv("NATS_USER"); ok {
		return u, os.Getenv("NATS_PASSWORD"), nil
	}
	path := os.Getenv("NATS_VAR")
	if path == "" {
		svc := os.Getenv("NATS_SERVICE")
		if svc == "" {
			svc = "nats"
		}
		path = "nomad/jobs/" + svc
	}
	addr := os.Getenv("NOMAD_ADDR")
	if addr == "" {
		addr = "http://127.0.0.1:4646"
	}
	u := strings.TrimSuffix(addr, "/") + "/v1/var/" + path
	if ns := os.Getenv("NOMAD_NAMESPACE"); ns != "" {
		u += "?namespace=" + url.QueryEscape(ns)
	}
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return "", "", err
	}
	if tok := os.Getenv("NOMAD_TOKEN"); tok != "" {
		req.Header.Set("X-Nomad-Token", tok)
	}
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return "", "", fmt.Errorf("reading the credentials from the Nomad Variable %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", "", fmt.Errorf("reading the credentials from the Nomad Variable %s: %s (or set NATS_USER and NATS_PASSWORD)", path, resp.Status)
	}
	var v struct{ Items map[string]string }
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return "", "", fmt.Errorf("reading the credentials from the Nomad Variable %s: %w", path, err)
	}
	if v.Items["user"] == "" || v.Items["password"] == "" {
		return "", "", fmt.Errorf("the Nomad Variable %s has no user or password", path)
	}
	return v.Items["user"], v.Items["password"], nil
}

func addStream(name string) error {
	nc, js, err := connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{name + ".>"}, Replicas: 3, Storage: jetstream.FileStorage,
	})
	if err != nil {
		return err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("stream %s: subjects %s.>, file storage, 3 replicas\n", name, name)
	return printCluster(info)
}

func printCluster(info *jetstream.StreamInfo) error {
	if info.Cluster == nil {
		return nil
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintf(w, "leader\t%s\n", info.Cluster.Leader)
	reps := append([]*jetstream.PeerInfo(nil), info.Cluster.Replicas...)
	sort.Slice(reps, func(i, j int) bool { return reps[i].Name < reps[j].Name })
	for _, r := range reps {
		state := "current"
		if !r.Current {
			state = fmt.Sprintf("behind by %d", r.Lag)
		}
		if r.Offline {
			state = "offline"
		}
		fmt.Fprintf(w, "replica\t%s\t%s\n", r.Name, state)
	}
	return w.Flush()
}

func streamInfo(name string) error {
	nc, js, err := connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		return err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("stream %s: %d messages, sequences %d to %d\n", name, info.State.Msgs, info.State.FirstSeq, info.State.LastSeq)
	return printCluster(info)
}

func pub(args []string) error {
	fs := flag.NewFlagSet("pub", flag.ContinueOnError)
	dur := fs.Duration("for", 0, "publish for this long instead of a count")
	if len(args) < 1 {
		return errors.New("usage: natsctl pub NAME COUNT | natsctl pub NAME -for DURATION")
	}
	name := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	count := 0
	if *dur == 0 {
		if fs.NArg() != 1 {
			return errors.New("usage: natsctl pub NAME COUNT | natsctl pub NAME -for DURATION")
		}
		n, err := strconv.Atoi(fs.Arg(0))
		if err != nil || n < 1 {
			return fmt.Errorf("COUNT: want a number above 0, got %q", fs.Arg(0))
		}
		count = n
	}
	nc, js, err := connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	subject := name + ".new"
	start := time.Now()
	lastAck, longest, longestAt := start, time.Duration(0), start
	var first, last uint64
	acked, failed := 0, 0
	for i := 1; ; i++ {
		if count > 0 && acked == count {
			break
		}
		if *dur > 0 && time.Since(start) >= *dur {
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		ack, err := js.Publish(ctx, subject, []byte("order "+strconv.Itoa(i)))
		cancel()
		now := time.Now()
		if err != nil {
			failed++
			// A count is published in full, through an election or a
			// member's restart, unless nothing is acknowledged for 30s.
			if count > 0 && now.Sub(lastAck) > 30*time.Second {
				return fmt.Errorf("nothing acknowledged for %v after %d messages; the last error: %w", now.Sub(lastAck).Round(time.Second), acked, err)
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if d := now.Sub(lastAck); d > longest {
			longest, longestAt = d, lastAck
		}
		lastAck = now
		if first == 0 {
			first = ack.Sequence
		}
		last = ack.Sequence
		acked++
		if *dur > 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	fmt.Printf("published %d messages to %s, each acknowledged by the stream: sequences %d to %d\n", acked, subject, first, last)
	if *dur > 0 {
		fmt.Printf("%d publishes failed (not acknowledged); the longest wait for an acknowledgement was %v, from %s\n",
			failed, longest.Round(10*time.Millisecond), longestAt.Format("15:04:05"))
	}
	return nil
}

func read(name string) error {
	nc, js, err := connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		return err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return err
	}
	last := info.State.LastSeq
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return err
	}
	var n, missing, prev uint64
	for prev < last {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return err
		}
		got := 0
		for msg := range batch.Messages() {
			md, err := msg.Metadata()
			if err != nil {
				return err
			}
			missing += md.Sequence.Stream - prev - 1
			prev = md.Sequence.Stream
			n++
			got++
		}
		if err := batch.Error(); err != nil {
			return err
		}
		if got == 0 {
			return fmt.Errorf("nothing after sequence %d of %d", prev, last)
		}
	}
	gone := "none"
	if missing > 0 {
		gone = strconv.FormatUint(missing, 10)
	}
	fmt.Printf("read %d messages of %s, sequences 1 to %d: %s missing\n", n, name, last, gone)
	return nil
}
