(program (_) @unit)
(class_body (_) @unit)
(interface_body (_) @unit)
