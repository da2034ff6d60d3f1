// Placeholder until the amp layer lands (issue 3).
