"""A "Copy link" button: puts a text on the viewer's clipboard with one click.

Streamlit 1.67 has no clipboard widget (only the small icon of `st.code`, which a wall-screen
or touch user does not find), so this is a small custom component (`st.components.v2`) running
in the page itself. The Clipboard API needs a secure context (https, or localhost); on plain
http from another machine the button falls back to selecting a hidden copy of the text and
`document.execCommand("copy")`, and if even that is refused it says so, leaving the visible
link to be copied by hand.
"""

from __future__ import annotations

import streamlit as st

__all__ = ["copy_button"]

_JS = r"""
async function copy(text) {
  if (navigator.clipboard && window.isSecureContext) {
    await navigator.clipboard.writeText(text);
    return;
  }
  const area = document.createElement("textarea");
  area.value = text;
  area.setAttribute("readonly", "");
  area.style.position = "fixed";
  area.style.opacity = "0";
  document.body.appendChild(area);
  area.select();
  const ok = document.execCommand("copy");
  area.remove();
  if (!ok) throw new Error("refused");
}

export default function ({ parentElement, data }) {
  let button = parentElement.querySelector("button");
  if (!button) {
    button = document.createElement("button");
    button.className = "tg-copy";
    button.type = "button";
    button.addEventListener("click", () => {
      button.dataset.busy = "1";
      copy(button.dataset.text).then(
        () => { button.textContent = "Copied ✓"; },
        () => { button.textContent = "Copy refused: select the link above"; },
      );
      setTimeout(() => {
        button.dataset.busy = "";
        button.textContent = button.dataset.label;
      }, 2500);
    });
    parentElement.appendChild(button);
  }
  // every rerun brings the current text (the view may have changed); the listener reads it
  button.dataset.text = data.text;
  button.dataset.label = data.label;
  if (button.dataset.busy !== "1") button.textContent = data.label;
}
"""

_CSS = """
.tg-copy {
  font: inherit; cursor: pointer; padding: 0.25rem 0.75rem; border-radius: 0.5rem;
  border: 1px solid rgba(128, 128, 128, 0.4); background: transparent; color: inherit;
}
.tg-copy:hover { border-color: #ff4b4b; color: #ff4b4b; }
"""

_component = st.components.v2.component("tidegauge_copy", html="", css=_CSS, js=_JS)


def copy_button(text: str, key: str, label: str = "Copy link") -> None:
    """A button under `key` that copies `text` (its latest value on every rerun)."""
    _component(key=key, data={"text": text, "label": label}, height="content")
