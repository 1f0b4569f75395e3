// The template editor of zeroshot-web's admin: CodeMirror 6 over a <textarea>, bundled into one
// file (static/vendor/codemirror/). The textarea stays the form field; the editor writes into it.
//
//   ZeroshotEditor.attach(textarea, { checkUrl, csrfToken })
//
// JSON syntax errors are marked at their place as you type; then the server checks the template
// (checkUrl answers {problems: [{path, message, severity}]}) and each problem is marked at the
// key or value its path names.
import { EditorView, basicSetup } from "codemirror";
import { EditorState } from "@codemirror/state";
import { json, jsonParseLinter } from "@codemirror/lang-json";
import { linter, lintGutter, forceLinting } from "@codemirror/lint";
import { HighlightStyle, syntaxHighlighting, ensureSyntaxTree } from "@codemirror/language";
import { tags } from "@lezer/highlight";

const PUNCTUATION = new Set(["{", "}", "[", "]", ",", ":", "⚠"]);

function children(node) {
  const found = [];
  for (let child = node.firstChild; child; child = child.nextSibling) {
    if (!PUNCTUATION.has(child.name)) found.push(child);
  }
  return found;
}

// Where a problem's path ("agents", 1, "contextStrategy", …) is in the text: the deepest key or
// value that exists, so that a missing field points at the object that lacks it.
export function locate(state, path) {
  const tree = ensureSyntaxTree(state, state.doc.length, 500);
  if (!tree) return { from: 0, to: 0 };
  let value = children(tree.topNode)[0];
  let mark = value;
  for (const segment of path) {
    if (!value) break;
    if (value.name === "Object" && typeof segment === "string") {
      const property = children(value).find((p) => {
        const name = p.getChild("PropertyName");
        if (!name) return false;
        try {
          return JSON.parse(state.sliceDoc(name.from, name.to)) === segment;
        } catch (error) {
          return false;
        }
      });
      if (!property) break;
      const parts = children(property);
      mark = parts[0] || property;
      value = parts[1];
    } else if (value.name === "Array" && typeof segment === "number") {
      const item = children(value)[segment];
      if (!item) break;
      mark = item;
      value = item;
    } else {
      break;
    }
  }
  if (!mark) return { from: 0, to: 0 };
  const line = state.doc.lineAt(mark.from);
  return { from: mark.from, to: Math.min(mark.to, line.to) };
}

const highlight = HighlightStyle.define([
  { tag: tags.propertyName, color: "var(--zs-json-key)" },
  { tag: tags.string, color: "var(--zs-json-string)" },
  { tag: [tags.number, tags.bool, tags.null], color: "var(--zs-json-literal)" },
  { tag: [tags.brace, tags.squareBracket, tags.separator, tags.punctuation], color: "var(--zs-json-punct)" },
]);

const theme = EditorView.theme({
  "&": { backgroundColor: "var(--zs-editor-bg)", color: "var(--zs-editor-fg)", fontSize: "13px" },
  ".cm-content": { fontFamily: "ui-monospace, SFMono-Regular, Menlo, Consolas, monospace", caretColor: "var(--zs-editor-fg)" },
  ".cm-gutters": { backgroundColor: "var(--zs-editor-gutter)", color: "var(--zs-editor-muted)", borderRight: "1px solid var(--zs-editor-line)" },
  ".cm-activeLine, .cm-activeLineGutter": { backgroundColor: "var(--zs-editor-active)" },
  "&.cm-focused .cm-selectionBackground, .cm-selectionBackground, ::selection": { backgroundColor: "var(--zs-editor-selection)" },
  "&.cm-focused": { outline: "2px solid var(--zs-editor-focus)" },
  ".cm-tooltip": { backgroundColor: "var(--zs-editor-bg)", color: "var(--zs-editor-fg)", border: "1px solid var(--zs-editor-line)" },
});

function problemsLinter(checkUrl, csrfToken) {
  const parse = jsonParseLinter();
  return async (view) => {
    const syntax = parse(view);
    if (syntax.length || !checkUrl) return syntax;
    const text = view.state.doc.toString();
    let answer;
    try {
      const response = await fetch(checkUrl, {
        method: "POST",
        headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken },
        body: text,
        credentials: "same-origin",
      });
      if (!response.ok) return [];
      answer = await response.json();
    } catch (error) {
      return [];
    }
    if (view.state.doc.toString() !== text) return [];
    return (answer.problems || []).map((problem) => {
      const at = locate(view.state, problem.path || []);
      return {
        from: at.from,
        to: at.to,
        severity: problem.severity === "warning" ? "warning" : "error",
        message: problem.message,
        source: "template check",
      };
    });
  };
}

export function attach(textarea, options = {}) {
  const view = new EditorView({
    state: EditorState.create({
      doc: textarea.value,
      extensions: [
        basicSetup,
        json(),
        syntaxHighlighting(highlight),
        theme,
        lintGutter(),
        linter(problemsLinter(options.checkUrl, options.csrfToken), { delay: 500 }),
        EditorView.lineWrapping,
        EditorState.tabSize.of(2),
        EditorView.updateListener.of((update) => {
          if (update.docChanged) textarea.value = update.state.doc.toString();
        }),
        EditorView.contentAttributes.of({ "aria-label": textarea.getAttribute("aria-label") || "Template JSON" }),
      ],
    }),
  });
  textarea.insertAdjacentElement("afterend", view.dom);
  textarea.hidden = true;
  view.dom.classList.add("zs-editor");
  // Saving must send what the editor holds, even if the last keystroke is not yet synced.
  if (textarea.form) {
    textarea.form.addEventListener("submit", () => { textarea.value = view.state.doc.toString(); });
  }
  return view;
}

export { forceLinting };
