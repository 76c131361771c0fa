#!/usr/bin/python3
"""A toolbar-less WebKitGTK browser for WebKitWebDriver (run by Debian's /usr/bin/python3, which has
PyGObject; not the project virtualenv). Debian's MiniBrowser keeps its window at least 447 px wide for
its toolbar, so a 320 px viewport needs a window holding only a WebView.

WebKitWebDriver starts it as `webkit_browser.py --automation [--width=W --height=H]` (the flag must be
passed in `webkitgtk:browserOptions.args`: WebKitWebDriver 2.50 does not add it) with the inspector
address in the environment; the WebContext allows automation and answers the session's
`create-web-view` signal with a fresh automation-controlled WebView in its own window.
Facts: ../shared/notes/webkit.md (viewport exactly W px, DPR 1, media queries match).
"""
import sys

import gi

gi.require_version("Gtk", "3.0")
gi.require_version("WebKit2", "4.1")
from gi.repository import Gtk, WebKit2  # noqa: E402


def _arg(name: str, default: int) -> int:
    for a in sys.argv[1:]:
        if a.startswith(f"--{name}="):
            return int(a.split("=", 1)[1])
    return default


WIDTH, HEIGHT = _arg("width", 320), _arg("height", 720)
windows = []


def new_view(context: WebKit2.WebContext) -> WebKit2.WebView:
    view = WebKit2.WebView(web_context=context, is_controlled_by_automation=True)
    win = Gtk.Window()
    win.set_default_size(WIDTH, HEIGHT)
    win.add(view)
    win.connect("destroy", lambda *_: Gtk.main_quit() if not any(w.get_visible() for w in windows if w is not win) else None)
    win.show_all()
    windows.append(win)
    return view


def automation_started(context: WebKit2.WebContext, session: WebKit2.AutomationSession) -> None:
    info = WebKit2.ApplicationInfo()
    info.set_name("agentfeedback-webkit-browser")
    info.set_version(1, 0, 0)
    session.set_application_info(info)
    session.connect("create-web-view", lambda _s: new_view(context))


def main() -> None:
    if "--automation" not in sys.argv:
        sys.exit("webkit_browser.py runs only under WebKitWebDriver (--automation)")
    Gtk.init([])
    context = WebKit2.WebContext.new_ephemeral()
    context.set_automation_allowed(True)
    context.connect("automation-started", automation_started)
    Gtk.main()


if __name__ == "__main__":
    main()
