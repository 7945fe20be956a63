// The dashboard's only script (served from this origin; the page's CSP allows no other).
"use strict";
