package testagent

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
)

// chrootBinaries are the programs the test and example jobs run inside the
// exec driver's chroot. Each needs only the C library.
var chrootBinaries = []string{"sh", "sleep", "date", "cat", "echo", "head", "tail", "wc", "touch", "true", "env"}

// chrootFiles are the other files the exec driver needs in the chroot: the
// executor looks the task user ("nobody") up in them.
var chrootFiles = []string{"/etc/passwd", "/etc/group"}

// chrootLibraries are the loader and C library those programs link against,
// at their conventional paths inside the chroot.
var chrootLibraries = map[string]string{
	"/lib/x86_64-linux-gnu/libc.so.6": "/lib/x86_64-linux-gnu/libc.so.6",
	"/lib64/ld-linux-x86-64.so.2":     "/lib64/ld-linux-x86-64.so.2",
}

// MinimalChrootEnv returns a Nomad client `chroot_env { … }` block holding
// only what the test jobs need. Nomad's default chroot copies /usr, /lib,
// /etc and more into every allocation: on these machines over 5 GB and 20 s
// per allocation, which would fill the disk in a few scenarios. This one is
// a few megabytes and starts at once. Host paths are resolved through their
// symlinks (Debian's /bin is /usr/bin) because Nomad copies files, not links.
// extra maps more host paths (files or directories) to their places in the
// chroot, for jobs that need more than a shell (WithChrootEnv).
func MinimalChrootEnv(extra map[string]string) (string, error) {
	pairs := map[string]string{}
	for host, inside := range extra {
		pairs[host+"|"+inside] = inside
	}
	for _, b := range chrootBinaries {
		host, err := filepath.EvalSymlinks(filepath.Join("/usr/bin", b))
		if err != nil {
			return "", fmt.Errorf("finding %s for the exec chroot: %w", b, err)
		}
		pairs[host+"|"+b] = "/bin/" + b
	}
	for inside, host := range chrootLibraries {
		real, err := filepath.EvalSymlinks(host)
		if err != nil {
			return "", fmt.Errorf("finding %s for the exec chroot: %w", host, err)
		}
		pairs[real+"|"+inside] = inside
	}
	for _, f := range chrootFiles {
		pairs[f+"|"+f] = f
	}
	keys := make([]string, 0, len(pairs))
	for k := range pairs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("  chroot_env {\n")
	for _, k := range keys {
		host := k[:strings.IndexByte(k, '|')]
		fmt.Fprintf(&b, "    %q = %q\n", host, pairs[k])
	}
	b.WriteString("  }\n")
	return b.String(), nil
}
