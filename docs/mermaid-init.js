// Draws the guide's ```mermaid blocks with Mermaid, when `mermaid.min.js` sits beside the
// chapters (docs/src/mermaid.min.js, copied into the book by mdBook; not in the repository:
// see docs/README.md). Without it the blocks stay as text, which reads as well.
(function () {
    "use strict";
    var blocks = document.querySelectorAll("code.language-mermaid");
    if (blocks.length === 0) {
        return;
    }
    var dark = ["coal", "navy", "ayu"].some(function (theme) {
        return document.documentElement.classList.contains(theme);
    });
    var script = document.createElement("script");
    script.src = (typeof path_to_root === "string" ? path_to_root : "") + "mermaid.min.js";
    script.onload = function () {
        blocks.forEach(function (code) {
            var pre = code.parentElement;
            var diagram = document.createElement("pre");
            diagram.className = "mermaid";
            diagram.textContent = code.textContent;
            pre.parentElement.replaceChild(diagram, pre);
        });
        window.mermaid.initialize({ startOnLoad: false, theme: dark ? "dark" : "default" });
        window.mermaid.run({ querySelector: "pre.mermaid" });
    };
    script.onerror = function () {
        // No mermaid.min.js in this build: the diagrams stay as their Mermaid text.
    };
    document.head.appendChild(script);
})();
