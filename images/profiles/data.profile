# corral image profile "data": tabular data, numerics, statistics and plots,
# from Debian bookworm's packages. `corral image build --profile data` makes
# corral-data:latest, corral's default image.
#
# Format: see python.profile and images/README.md.

python3
# arrays, tables and their fast paths
python3-numpy python3-pandas python3-numexpr python3-bottleneck
# science, statistics, learning, symbols, graphs
python3-scipy python3-statsmodels python3-sklearn python3-sympy python3-networkx
# plots and pictures
python3-matplotlib python3-seaborn python3-pil
# spreadsheets and documents pandas reads and writes
python3-openpyxl python3-xlsxwriter python3-xlrd python3-odf
# text formats
python3-lxml python3-bs4 python3-yaml python3-tabulate
# packages from an index (a session granted the network, see the README's
# network section) and fetching by hand: pip and curl, with the CAs they trust
python3-pip curl ca-certificates

# python3-scipy depends on python3-pythran, which brings a C++ compiler,
# Boost's headers and Python's development files (about 400 MiB) that no
# program in a sandbox uses: they go once everything is installed.
purge: python3-pythran python3-beniget python3-gast *-dev gcc gcc-12 g++ g++-12 cpp cpp-12
purge: binutils binutils-common binutils-x86-64-linux-gnu libbinutils libctf0 libctf-nobfd0
purge: libgprofng0 libasan8 libtsan2 liblsan0 libubsan1 libitm1 libcc1-0 libisl23 libmpc3
purge: libc-dev-bin rpcsvc-proto libjs-sphinxdoc libjs-jquery libjs-underscore
purge: libfile-find-rule-perl libnumber-compare-perl libtext-glob-perl perl perl-modules-5.36
purge: libperl5.36

# A ready sandbox has these imported before its call comes: a warm call that
# uses pandas and matplotlib pays for neither import.
preload: numpy pandas matplotlib matplotlib.pyplot pandas.plotting._matplotlib corral_matplotlib
# ...and a figure drawn and saved (into memory) while the sandbox waits, so
# that a call's first plot finds fonts and renderer ready.
warm: import io, matplotlib.pyplot as plt
warm: fig = plt.figure(); fig.gca().plot([0, 1]); fig.gca().set_title("warm-up")
warm: fig.savefig(io.BytesIO(), format="png"); plt.close("all")

# Figures: plt.show() saves them under /workspace/out (the image build puts
# the backend in place when matplotlib is installed); matplotlib's font cache
# is built ahead and copied to /tmp, its only writable place, at start.
env: MPLBACKEND=module://corral_matplotlib
env: MPLCONFIGDIR=/tmp/matplotlib
