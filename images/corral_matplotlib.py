"""matplotlib's backend in corral's sandboxes: Agg (there is no display),
and plt.show() saves each open figure under /workspace/out as a PNG, which
corral returns with the result as a picture. images/build.sh installs it in
images that have matplotlib; the profile selects it with
MPLBACKEND=module://corral_matplotlib."""
import os

from matplotlib.backend_bases import FigureManagerBase
from matplotlib.backends.backend_agg import FigureCanvasAgg

FigureCanvas = FigureCanvasAgg
FigureManager = FigureManagerBase

OUT = os.path.join(os.environ.get('CORRAL_WORKSPACE') or '/workspace', 'out')


def _next_name():
    n = 1
    while os.path.exists(os.path.join(OUT, 'figure-%d.png' % n)):
        n += 1
    return os.path.join(OUT, 'figure-%d.png' % n)


def show(*args, **kwargs):
    """Save every open figure as out/figure-N.png (N not yet taken), then
    close them, as a notebook shows a figure once."""
    import matplotlib.pyplot as plt
    os.makedirs(OUT, exist_ok=True)
    for num in plt.get_fignums():
        plt.figure(num).savefig(_next_name())
    plt.close('all')
