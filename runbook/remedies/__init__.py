"""Proposals, the approval store and audit trail, guards, and their execution through Ansible."""
