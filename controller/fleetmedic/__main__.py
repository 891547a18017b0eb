from fleetmedic.cli import main

main()
