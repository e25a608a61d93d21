# A minimal config for trying nomad-statefulset on a laptop:
#
#   nomad agent -dev &
#   nomad-statefulset agent -dev -config examples/agent/dev.hcl
#
# -dev needs no Consul: state goes to an embedded store under data_dir and
# there is no leader election. Everything not set here has its default.

log_level = "debug"

# Keep dev state next to the checkout instead of /var/lib.
data_dir = "./.nomad-statefulset-dev"

# Resync more often than the 5m default, so that experiments converge fast.
resync_interval = "30s"

http {
  enable_debug = true
}
