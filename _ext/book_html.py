"""A fix to the book's HTML that _config.yml cannot make (listed under `local_extensions`).

Sphinx 7.4 registers a script that an extension adds after the builder started both in the
builder and in its registry, and writes it twice into every page. For sphinx-thebe's inline
`const THEBE_JS_URL = ...` the second copy is a SyntaxError in the browser's console on every
page. This drops the repeats of inline scripts (same body, same attributes) from each page.
"""


def _drop_repeated_inline_scripts(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, kept = set(), []
    for js in scripts:
        attributes = getattr(js, "attributes", {})
        inline = "body" in attributes and (getattr(js, "filename", None) or "") in ("", "_static/")
        if inline:
            key = tuple(sorted(attributes.items()))
            if key in seen:
                continue
            seen.add(key)
        kept.append(js)
    scripts[:] = kept


def setup(app):
    app.connect("html-page-context", _drop_repeated_inline_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
