# corral image profile "corral-node": corral:latest plus Node and npm, for
# hosts whose MCP servers are `npx` commands: corral starts its stdio
# upstreams inside its own container, so they need Node there.
# `corral image build --profile corral-node` makes corral-node:latest.
# Debian's nodejs (18) and npm; everything else as in corral.profile, but
# nothing is removed (npm needs its tree, and a shell for its scripts).
daemon: corral
libcurl4 libjansson4 libseccomp2 libcap-ng0 libmicrohttpd12 libssl3 ca-certificates
nodejs npm
