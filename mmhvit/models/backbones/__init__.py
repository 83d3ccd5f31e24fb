# One line per backbone family; importing a module registers its class.
