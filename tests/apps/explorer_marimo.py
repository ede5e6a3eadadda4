# A marimo app that shows the GroupNorm Explorer: `marimo run tests/apps/explorer_marimo.py`
# (tests/test_explorer_marimo.py serves it headless and drives it in Chromium). The input is the one the test
# computes its statistics from.
import marimo

app = marimo.App(width="full")


@app.cell
def _():
    import marimo as mo
    import numpy as np

    import numr_web

    x = (1.5 + 2.0 * np.random.default_rng(2018).standard_normal((2, 8, 4, 4))).astype(np.float32)
    explorer = mo.ui.anywidget(numr_web.Explorer(x, num_groups=4, device="cpu"))
    explorer  # noqa: B018  (a marimo cell shows its last expression)
    return explorer, mo


@app.cell
def _(explorer, mo):
    # what the kernel holds after the view's changes (marimo re-runs this cell on each; the test reads it)
    mo.md(f"kernel sees G = {explorer.widget.num_groups}, status {explorer.widget.status}")
    return


if __name__ == "__main__":
    app.run()
