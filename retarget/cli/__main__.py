from retarget.cli import main

raise SystemExit(main())
