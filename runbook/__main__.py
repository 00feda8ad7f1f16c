from runbook.start import console

console()
