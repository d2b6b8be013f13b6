// The viewer entry module (placeholder; the client lives on branch v3).
