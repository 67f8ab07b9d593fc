//go:build unix && !linux

package cli

import (
	"os/exec"
	"strconv"
	"strings"
)

// groupMembers lists the live processes of process group pgid (zombies
// left out), as ps(1) reports them: their pids and command lines.
func groupMembers(pgid int) []member {
	out, err := exec.Command("ps", "-A", "-o", "pid=", "-o", "pgid=", "-o", "stat=", "-o", "args=").Output()
	if err != nil {
		return nil
	}
	var ms []member
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[1] != strconv.Itoa(pgid) || strings.HasPrefix(f[2], "Z") {
			continue
		}
		pid, err := strconv.Atoi(f[0])
		if err != nil {
			continue
		}
		ms = append(ms, member{pid: pid, command: strings.Join(f[3:], " ")})
	}
	return ms
}
