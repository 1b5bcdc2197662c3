"""The review console (issue 16): server-rendered HTML pages at `/console/…`, served by the API
process, where an operator signs in with a token, finds workflows in review, sees a workflow's
signals against its deadlines on a timeline, and repairs it with the API's own units.

`pages` holds the resources and the session handling, `timeline` the geometry of the SVG timeline
(pure), `words` what codes mean in words; templates and the stylesheet are package data.
"""
