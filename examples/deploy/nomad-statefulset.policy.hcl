# The Nomad ACL policy of nomad-statefulset (docs/operations.md, "Nomad ACL
# policy", with alloc-exec), bound to the daemon's own job so that its
# workload identity carries it:
#
#   nomad acl policy apply -namespace default -job nomad-statefulset \
#     nomad-statefulset nomad-statefulset.policy.hcl
#
# Repeat the namespace block for every namespace whose sets it manages.
#
# alloc-exec runs a set's statefulset_switchover_command and
# statefulset_disruption_check inside its pods, through Nomad's alloc exec
# API (the daemon execs only into its own children). Without it every
# switchover and disruption check fails, and each set that declares one
# (examples/postgres does both) holds its rollouts, drains and scale-downs
# for ever (condition Held, naming alloc-exec). The minimal
# policy leaves it out: drop it here only if none of your sets declares
# these commands. A set on a driver without filesystem isolation
# (raw_exec) needs alloc-node-exec instead, which lets the token run
# commands on the node itself: prefer exec or docker for such sets.
namespace "default" {
  capabilities = ["list-jobs", "read-job", "submit-job", "host-volume-write", "alloc-exec"]
}

host_volume "*" {
  policy = "write"
}

node {
  policy = "read"
}
