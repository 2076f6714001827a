# corral image profile "python": Debian's python3 alone, the smallest image
# corral runs. `corral image build --profile python` makes corral-python:latest.
#
# Format (images/README.md): Debian package names, any number a line; lines
# starting with "preload:" name Python modules a ready sandbox imports before
# its call comes; "env:" lines set variables for the code (NAME=VALUE);
# "warm:" lines are Python a ready sandbox runs after its preloads (to
# rehearse what a call will do); "purge:" lines name packages (or dpkg
# patterns) removed after the install, whatever depends on them; "#" starts
# a comment.
python3
