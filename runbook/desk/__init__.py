"""The approval desk on the web (`runbook desk serve`; docs/desk.md).

settings     the config's desk: section, validated (sign-in, proxies, rules)
policy       who may decide what; a proposal's severity (pure)
sessions     server-side sessions, CSRF tokens, the login rate limit
auth         OpenID Connect (Authlib) and the trusted proxy header
state        what every route reads (DeskApp), answering with a page or a refusal
filters      the templates' filters (durations, times, diff lines, severity)
app          the Starlette app: security headers, sign-in routes, POST checks
views        the pages: queue, proposal, audit; approve, deny, check mode, verify
runs         approvals and checks in worker threads, their output (plain lines) for the page

The two-person rule is the approval store's (runbook.remedies.two_person), applied inside
Desk.approve with the signed-in person as the approver.
"""
