# A minimal config for trying nomad-statefulset on a laptop:
#
#   nomad agent -dev &
#   nomad-statefulset agent -dev -config examples/agent/dev.hcl
#
# -dev needs no Consul: state goes to an embedded store and there is no
# leader election. Unless data_dir is set, -dev keeps its data in
# $TMPDIR/nomad-statefulset-dev, so history survives an agent restart.
# Everything not set here has its default.

log_level = "debug"

# Resync more often than the 5m default, so that experiments converge fast.
resync_interval = "30s"

http {
  enable_debug = true
}
