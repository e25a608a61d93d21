package command

// Option help shared between commands, in the nomad CLI's layout. Each
// command's Help includes the groups its flag set has.

// commonOptionsHelp documents FlagSetCommon.
const commonOptionsHelp = `General Options:

  -namespace=<namespace>
    The Nomad namespace of the set's parent job. Defaults to the
    NOMAD_NAMESPACE environment variable, else "default". For status with no
    set, "*" lists every namespace.

  -json
    Print the result as JSON instead of text.
`

// agentOptionsHelp documents FlagSetAgent without FlagSetNomad, which
// brings -token.
const agentOptionsHelp = agentAddressHelp + agentTokenHelp

// agentAddressHelp documents FlagSetAgent's -address, for commands that
// also take FlagSetNomad (whose -token the agent is read with too).
const agentAddressHelp = `
Agent Options:

  -address=<addr>
    The address of the nomad-statefulset agent's HTTP API. Overrides the
    NOMAD_STATEFULSET_ADDR environment variable. Default:
    http://127.0.0.1:4650. Use https:// for an agent with http { tls {} };
    NOMAD_STATEFULSET_CACERT, NOMAD_STATEFULSET_CLIENT_CERT,
    NOMAD_STATEFULSET_CLIENT_KEY and NOMAD_STATEFULSET_SKIP_VERIFY set its
    TLS.
`

// agentTokenHelp documents the -token of FlagSetAgent.
const agentTokenHelp = `
  -token=<token>
    The Nomad ACL token sent to the agent, which with Nomad's ACLs on
    needs read-job in the set's namespace. Overrides NOMAD_TOKEN.
`

// nomadOptionsHelp documents FlagSetNomad.
const nomadOptionsHelp = `
Nomad Options:

  -nomad-address=<addr>
    The address of the Nomad HTTP API. Overrides NOMAD_ADDR. Default:
    http://127.0.0.1:4646.

  -token=<token>
    The Nomad ACL token, sent to Nomad and to the agent. Overrides
    NOMAD_TOKEN.

  -region=<region>
    The Nomad region. Overrides NOMAD_REGION.

  -ca-cert=<path>, -ca-path=<path>, -client-cert=<path>, -client-key=<path>,
  -tls-server-name=<name>, -tls-skip-verify
    TLS settings for Nomad, as in the nomad CLI. They override NOMAD_CACERT,
    NOMAD_CAPATH, NOMAD_CLIENT_CERT, NOMAD_CLIENT_KEY, NOMAD_TLS_SERVER_NAME
    and NOMAD_SKIP_VERIFY.
`
