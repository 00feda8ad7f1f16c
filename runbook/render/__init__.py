"""Rendering, grouped by what it renders: a node's verdict and walk, a sweep, a job, a
recovery check. Pure functions from typed results to text; nothing here opens a transport."""
