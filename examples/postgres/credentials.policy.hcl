# Lets a member of examples/postgres read its passwords when Nomad's ACLs
# are on. A task reads only its own job's variables (nomad/jobs/<job>) by
# default, and each member is a job of its own (postgres-<n>), so bind this
# policy to every member's job, before it starts (a scale-up's new
# ordinals too):
#
#   for n in 0 1 2; do
#     nomad acl policy apply -namespace default -job postgres-$n \
#       postgres-$n-credentials examples/postgres/credentials.policy.hcl
#   done
#
# The path is the job's variable "credentials" (nomad/jobs/postgres by
# default), in the namespace the set runs in.
namespace "default" {
  variables {
    path "nomad/jobs/postgres" {
      capabilities = ["read"]
    }
  }
}
