# The Nomad ACL policy of nomad-statefulset (the README's "Nomad ACL
# policy"), bound to the daemon's own job so that its workload identity
# carries it:
#
#   nomad acl policy apply -namespace default -job nomad-statefulset \
#     nomad-statefulset nomad-statefulset.policy.hcl
#
# Repeat the namespace block for every namespace whose sets it manages.
namespace "default" {
  capabilities = ["list-jobs", "read-job", "submit-job", "host-volume-write"]
}

host_volume "*" {
  policy = "write"
}

node {
  policy = "read"
}
