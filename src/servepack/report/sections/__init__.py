"""The sections of the HTML report, one module each: `section(ctx) -> html`."""
