# corral image profile "corral": corral itself as a container, for laptops
# whose engine runs in a VM (Docker Desktop, Podman machine, Colima, OrbStack, WSL2).
# `corral image build --profile corral` makes corral:latest: this corral
# binary, the libraries it loads and the CA certificates, nothing else
# (no shell, no package manager). Its entry point is corral; sandboxes are
# its siblings on the engine whose socket is mounted in (README, "corral in
# a container").
#
# "daemon:" makes an image that runs the binary `corral image build` runs
# (its libraries must be bookworm's); "keep:" lines name what stays besides
# it and its libraries (a directory with what it holds): everything else
# the packages installed is removed.
daemon: corral
libcurl4 libjansson4 libseccomp2 libcap-ng0 libmicrohttpd12 libssl3 ca-certificates
keep: /etc/ssl/certs/ca-certificates.crt /etc/passwd /etc/group /etc/nsswitch.conf
keep: /etc/os-release /usr/lib/os-release /tmp /root
