from runbook.cli.app import console

console()
