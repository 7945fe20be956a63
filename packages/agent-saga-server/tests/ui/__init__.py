"""Browser tests of the dashboard (chromium through Playwright)."""
