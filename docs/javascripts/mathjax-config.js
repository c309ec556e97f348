// MathJax 3 reads the formulas pymdownx.arithmatex leaves as \( .. \) and \[ .. \] inside
// elements of class "arithmatex" (generic mode).
//
// The page's math is typeset by the document$ subscriber alone, the first page included
// (startup.typeset: false), and only once MathJax is ready (it subscribes from pageReady).
// MathJax must not typeset the page on its own first: the subscriber's clearCache() drops the
// CHTML stylesheet, whose rules hold every glyph (each character is drawn as the ::before
// content of its mjx-c element), and a second typeset finds no TeX left on the page, so the
// stylesheet came back without them and every formula kept its box but drew nothing.
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"]],
    displayMath: [["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true,
  },
  options: {
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex",
  },
  startup: {
    typeset: false,
    pageReady() {
      return MathJax.startup.defaultPageReady().then(() => {
        // document$ (mkdocs-material) replays the page already loaded, then each page that
        // instant navigation swaps in: typeset that page's math afresh
        document$.subscribe(() => {
          MathJax.startup.output.clearCache();
          MathJax.typesetClear();
          MathJax.texReset();
          MathJax.typesetPromise();
        });
      });
    },
  },
};
