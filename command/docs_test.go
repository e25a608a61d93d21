package command

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// The repository's documentation, checked from here because the CLI is
// what it documents most: the README stays a landing page, every relative
// link of the README and of docs/ leads somewhere, and BENCHMARKS.md opens
// with its summary table.

const (
	repoRoot        = ".."
	readmeMaxLines  = 260
	benchmarksTitle = "# Benchmarks"
)

// docFiles are the Markdown files whose links are checked.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{filepath.Join(repoRoot, "README.md"), filepath.Join(repoRoot, "BENCHMARKS.md")}
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil || len(pages) == 0 {
		t.Fatalf("docs/*.md: %v, %d pages", err, len(pages))
	}
	return append(files, pages...)
}

// TestReadmeIsALandingPage: at most readmeMaxLines lines, and it starts with
// the two commands a newcomer needs.
func TestReadmeIsALandingPage(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > readmeMaxLines {
		t.Errorf("README.md has %d lines; a landing page has at most %d (the rest belongs in docs/)", len(lines), readmeMaxLines)
	}
	// The title, then a block whose first two commands are make demo and
	// make test.
	var block []string
	for i, l := range lines {
		if strings.HasPrefix(l, "```") {
			for _, c := range lines[i+1:] {
				if strings.HasPrefix(c, "```") {
					break
				}
				block = append(block, c)
			}
			break
		}
		if i > 0 && strings.TrimSpace(l) != "" {
			t.Fatalf("README.md:%d: %q comes before the two commands", i+1, l)
		}
	}
	if len(block) < 2 || !strings.HasPrefix(block[0], "make demo") || !strings.HasPrefix(block[1], "make test") {
		t.Errorf("README.md does not start with `make demo` and `make test`: %q", block)
	}
}

var (
	mdLink     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	inlineCode = regexp.MustCompile("`[^`]*`")
	heading    = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
)

// slug is GitHub's anchor for a heading: lower case, spaces to '-', every
// other character but letters, digits, '-' and '_' dropped.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// mdDoc is a Markdown file's links (outside code) and anchors.
type mdDoc struct {
	links   []mdRef
	anchors map[string]bool
}

type mdRef struct {
	line   int
	target string
}

func readMarkdown(t *testing.T, path string) mdDoc {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc := mdDoc{anchors: map[string]bool{}}
	seen := map[string]int{}
	fenced := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		if m := heading.FindStringSubmatch(line); m != nil {
			s := slug(strings.ReplaceAll(m[1], "`", ""))
			if k := seen[s]; k > 0 {
				doc.anchors[s+"-"+strconv.Itoa(k)] = true
			} else {
				doc.anchors[s] = true
			}
			seen[s]++
		}
		for _, m := range mdLink.FindAllStringSubmatch(inlineCode.ReplaceAllString(line, ""), -1) {
			doc.links = append(doc.links, mdRef{line: n, target: m[1]})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return doc
}

// TestDocLinksLeadSomewhere: every relative link of README.md,
// BENCHMARKS.md and docs/*.md names a file or directory of the repository,
// and a #anchor into a Markdown file names one of its headings.
func TestDocLinksLeadSomewhere(t *testing.T) {
	docs := map[string]mdDoc{}
	read := func(p string) mdDoc {
		p = filepath.Clean(p)
		if d, ok := docs[p]; ok {
			return d
		}
		d := readMarkdown(t, p)
		docs[p] = d
		return d
	}
	checked := 0
	for _, file := range docFiles(t) {
		for _, l := range read(file).links {
			if strings.Contains(l.target, "://") || strings.HasPrefix(l.target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(l.target, "#")
			target := filepath.Clean(file)
			if path != "" {
				target = filepath.Join(filepath.Dir(file), path)
			}
			if _, err := os.Stat(target); err != nil {
				t.Errorf("%s:%d: the link %q leads nowhere: %v", file, l.line, l.target, err)
				continue
			}
			checked++
			if anchor == "" || !strings.HasSuffix(target, ".md") {
				continue
			}
			if !read(target).anchors[anchor] {
				t.Errorf("%s:%d: the link %q names no heading of %s", file, l.line, l.target, target)
			}
		}
	}
	if checked < 50 {
		t.Errorf("only %d links checked: is the link pattern still right?", checked)
	}
}

// TestDocsHoldNoLabNotes: the docs are for users; the history of
// measurements and internal issue numbers live in git.
func TestDocsHoldNoLabNotes(t *testing.T) {
	labNote := regexp.MustCompile(`\b[Rr]uns? \d+[–-]\d+\b|\b[Ii]ssue \d{1,3}\b|DESIGN §`)
	files := docFiles(t)
	for _, file := range files {
		if strings.HasSuffix(file, "BENCHMARKS.md") {
			continue
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := labNote.FindString(line); m != "" {
				t.Errorf("%s:%d: %q is a lab note: %s", file, i+1, m, line)
			}
		}
	}
}

// TestBenchmarksStartWithTheSummary: BENCHMARKS.md opens with one table of
// every benchmark's goal, latest figure, date and command.
func TestBenchmarksStartWithTheSummary(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "BENCHMARKS.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	if lines[0] != benchmarksTitle {
		t.Fatalf("BENCHMARKS.md starts %q, want %q", lines[0], benchmarksTitle)
	}
	var header string
	for _, l := range lines[1:] {
		if strings.HasPrefix(l, "## ") {
			break
		}
		if strings.HasPrefix(l, "|") {
			header = strings.ToLower(l)
			break
		}
	}
	if header == "" {
		t.Fatal("BENCHMARKS.md has no table before its first section")
	}
	for _, col := range []string{"benchmark", "goal", "latest figure", "date", "command"} {
		if !strings.Contains(header, col) {
			t.Errorf("the summary table's header %q has no column %q", header, col)
		}
	}
	// Every row but the header and the rule names a section below.
	doc := readMarkdown(t, filepath.Join(repoRoot, "BENCHMARKS.md"))
	rows := 0
	for _, l := range lines[1:] {
		if strings.HasPrefix(l, "## ") {
			break
		}
		if !strings.HasPrefix(l, "|") || strings.HasPrefix(l, "|---") || strings.ToLower(l) == header {
			continue
		}
		rows++
		m := regexp.MustCompile(`\]\(#([^)]+)\)`).FindStringSubmatch(l)
		if m == nil || !doc.anchors[m[1]] {
			t.Errorf("summary row names no section of BENCHMARKS.md: %s", l)
		}
	}
	if rows < 5 {
		t.Errorf("the summary table has %d rows", rows)
	}
}
